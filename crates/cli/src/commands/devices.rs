//! `kindle devices`: the compute devices this build can run on, and which of them open here.

use anyhow::Result;
use clap::Args;
use kindle_cli::engine::{DeviceKind, describe_device};

#[derive(Args, Debug)]
pub struct DevicesArgs {
    /// Print JSON (a list of `{device, available, detail, dtypes}`)
    #[arg(long)]
    pub json: bool,
}

/// Run the command.
pub fn run(args: DevicesArgs) -> Result<()> {
    let reports: Vec<_> = DeviceKind::ALL.into_iter().map(describe_device).collect();
    if args.json {
        println!("{}", serde_json::to_string(&reports)?);
        return Ok(());
    }
    for r in &reports {
        let status = if r.available {
            "available"
        } else {
            "unavailable"
        };
        let dtypes = if r.dtypes.is_empty() {
            String::new()
        } else {
            format!(" [--dtype {}]", r.dtypes.join("|"))
        };
        println!("{:<8} {:<12} {}{}", r.device, status, r.detail, dtypes);
    }
    Ok(())
}
