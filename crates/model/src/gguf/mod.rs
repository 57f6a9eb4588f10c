//! GGUF reader (placeholder, being written).
