//! `kindle devices`: the compute devices this build can run on, and which of them open here.

use anyhow::Result;
use clap::Args;
use kindle_model::DeviceKind;
use kindle_model::device::describe;
use serde_json::json;

#[derive(Args, Debug)]
pub struct DevicesArgs {
    /// Print JSON (a list of `{device, available, detail, dtypes}`)
    #[arg(long)]
    pub json: bool,
}

/// Run the command.
pub fn run(args: DevicesArgs) -> Result<()> {
    let reports: Vec<_> = DeviceKind::ALL.into_iter().map(describe).collect();
    if args.json {
        let rows: Vec<_> = reports
            .iter()
            .map(|r| {
                json!({
                    "device": r.kind.name(),
                    "available": r.available,
                    "detail": r.detail,
                    "dtypes": r.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string(&rows)?);
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
            let names: Vec<_> = r.dtypes.iter().map(|d| d.name()).collect();
            format!(" [--dtype {}]", names.join("|"))
        };
        println!("{:<8} {:<12} {}{}", r.kind.name(), status, r.detail, dtypes);
    }
    Ok(())
}
