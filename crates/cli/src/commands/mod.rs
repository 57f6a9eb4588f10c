//! One module per subcommand: its arguments and its `run`.

pub mod bench;
pub mod chat;
pub mod devices;
pub mod generate;
pub mod inspect;
pub mod score;
pub mod tokenize;
