//! Which targets a command runs, which of them must succeed, and the runtimes they need: the
//! targets as requested, then provisioned into [`PlannedTarget`]s that jobs are built from.

use std::collections::HashMap;

use anyhow::Result;

use super::PlannedTarget;
use crate::runtime::{builds_for, platform_obstacle, Build, Provisioner, Runtime, TargetRuntime};
use crate::target::{parse_targets, TargetRole, TargetSpec};

/// A target asked for, with its role in the audit.
#[derive(Debug, Clone)]
pub struct Requested {
    pub spec: TargetSpec,
    pub role: TargetRole,
    /// Whether its failure fails the audit (exit code 3).
    pub required: bool,
}

/// Every target this machine might run, for `compare` without `--target`.
pub fn default_specs() -> Vec<TargetSpec> {
    crate::target::all_known()
        .into_iter()
        .filter(|s| platform_obstacle(&s.backend).is_none())
        .collect()
}

/// The baseline's id: the CPU EP on the same quantized model without graph rewrites.
pub const BASELINE_ID: &str = "cpu:noopt";

/// Parses `--target` values (or picks the defaults) and adds the baseline.
pub fn targets(flags: &[String], allow_failure: &[String], add_baseline: bool) -> Result<Vec<Requested>> {
    let explicit = !flags.is_empty();
    let specs = if explicit {
        parse_targets(flags)?
    } else {
        default_specs()
    };
    let mut out: Vec<Requested> = specs
        .into_iter()
        .map(|spec| {
            let required = explicit && !allow_failure.iter().any(|p| crate::pattern::names_target(p, &spec.id));
            Requested {
                spec,
                role: TargetRole::Target,
                required,
            }
        })
        .collect();
    if add_baseline && !out.iter().any(|r| r.spec.id == BASELINE_ID) {
        let mut base = parse_targets(&[BASELINE_ID.to_string()])?;
        out.push(Requested {
            spec: base.remove(0),
            role: TargetRole::Baseline,
            required: false,
        });
    }
    Ok(out)
}

/// Finds (or fetches) the runtimes of every target, once per build.
pub fn provision(targets: Vec<Requested>, provisioner: &Provisioner) -> Result<Vec<PlannedTarget>> {
    let mut cache: HashMap<&'static str, Result<Runtime, String>> = HashMap::new();
    let mut get = |b: &'static Build| -> Result<Result<Runtime, String>> {
        if let Some(r) = cache.get(b.key) {
            return Ok(r.clone());
        }
        let r = match provisioner.get(b) {
            Ok(rt) => Ok(rt),
            Err(e) => {
                // A bad --runtime flag is the user's error; a missing download is a finding.
                if matches!(e.downcast_ref(), Some(crate::error::RuntimeError::BadChoice(_))) {
                    return Err(e);
                }
                Err(crate::error::one_line(&e))
            }
        };
        cache.insert(b.key, r.clone());
        Ok(r)
    };
    let mut planned = Vec::with_capacity(targets.len());
    for Requested { spec, role, required } in targets {
        let runtime = match platform_obstacle(&spec.backend) {
            Some(reason) => Err(reason),
            None => {
                let (host, plugin) = builds_for(&spec.backend);
                match get(host)? {
                    Err(e) => Err(e),
                    Ok(h) => match plugin.map(&mut get).transpose()? {
                        Some(Err(e)) => Err(e),
                        Some(Ok(p)) => Ok(TargetRuntime {
                            host: h,
                            plugin: Some(p),
                        }),
                        None => Ok(TargetRuntime { host: h, plugin: None }),
                    },
                }
            }
        };
        planned.push(PlannedTarget {
            spec,
            role,
            required,
            runtime,
        });
    }
    Ok(planned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_targets_are_required_unless_allowed_to_fail() {
        let t = targets(
            &["cpu".into(), "qnn:sm8650".into(), "qnn:sm8350".into()],
            &["qnn:sm83*".into()],
            true,
        )
        .unwrap();
        let ids: Vec<_> = t.iter().map(|r| (r.spec.id.as_str(), r.role, r.required)).collect();
        assert_eq!(
            ids,
            vec![
                ("cpu", TargetRole::Target, true),
                ("qnn:sm8650", TargetRole::Target, true),
                ("qnn:sm8350", TargetRole::Target, false),
                ("cpu:noopt", TargetRole::Baseline, false)
            ]
        );
    }

    #[test]
    fn an_explicit_noopt_target_is_its_own_baseline() {
        let t = targets(&["cpu:noopt".into()], &[], true).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].role, TargetRole::Target);
    }
}
