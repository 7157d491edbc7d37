//! `fingerprint`: measure how each target rounds, saturates, evaluates nonlinear functions and
//! accumulates, with generated probe models whose inputs sit on rounding ties, and say which
//! candidate rule explains every code the target returned.

pub mod cache;
pub mod classify;
pub mod probes;
pub mod result;
pub mod rounding;
pub mod run;

use anyhow::Result;

use crate::execution::exec::selection::{provision, targets};
use crate::execution::exec::{ExecOptions, Executor};
use crate::execution::runtime::Provisioner;
use crate::foundation::error::bad_flag;
use probes::Probe;
use result::{FingerprintReport, FINGERPRINT_SCHEMA_VERSION};
pub use run::FingerprintOptions;

/// Everything `fingerprint` was asked to do.
#[derive(Debug, Clone)]
pub struct FingerprintCommand {
    /// The targets asked for (`None`: every target this machine can run).
    pub targets: Option<Vec<crate::data::target::TargetSpec>>,
    /// Probe ids or `prefix*` patterns; empty means every probe.
    pub probes: Vec<String>,
    pub options: FingerprintOptions,
    pub exec: ExecOptions,
}

/// The probes `patterns` select (all when empty); a pattern that selects nothing is an error
/// that lists the probe ids.
pub fn select(patterns: &[String]) -> Result<Vec<Probe>> {
    let all = probes::all();
    if patterns.is_empty() {
        return Ok(all);
    }
    for p in patterns {
        if !all.iter().any(|probe| matches(p, probe.id)) {
            let ids: Vec<&str> = all.iter().map(|p| p.id).collect();
            return Err(bad_flag(format!(
                "--probe {p} matches no probe; probes: {}",
                ids.join(", ")
            )));
        }
    }
    Ok(all
        .into_iter()
        .filter(|probe| patterns.iter().any(|p| matches(p, probe.id)))
        .collect())
}

fn matches(pattern: &str, id: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => pattern == id,
    }
}

/// Runs the command: provisions each target's runtime and fingerprints it.
pub fn run_command(cmd: &FingerprintCommand) -> Result<FingerprintReport> {
    if cmd.options.repeat == 0 {
        return Err(bad_flag("--repeat must be at least 1"));
    }
    let probes = select(&cmd.probes)?;
    let provisioner = Provisioner::new(&cmd.exec.runtimes)?;
    let planned = provision(
        targets(cmd.targets.as_deref(), &[], false, &Default::default())?,
        &provisioner,
    )?;
    let rows = run::fingerprint(&planned, &probes, &Executor::new(&cmd.exec)?, &cmd.options)?;
    Ok(FingerprintReport {
        schema_version: FINGERPRINT_SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        host: Some(crate::foundation::host::this_host()),
        probe_set_version: probes::PROBE_SET_VERSION,
        repeat: cmd.options.repeat,
        targets: rows,
    })
}
