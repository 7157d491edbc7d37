//! Which targets a command runs, which of them must succeed, and the runtimes they need: the
//! targets as requested, then provisioned into [`PlannedTarget`]s that jobs are built from.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;

use super::PlannedTarget;
use crate::data::target::{parse_targets, ReleaseSpec, TargetRole, TargetSpec};
use crate::execution::runtime::{
    builds_for, family_of, platform_obstacle, releases_here, Build, Provisioner, Runtime, TargetRuntime,
};
use crate::foundation::error::bad_flag;

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
    crate::data::target::all_known()
        .into_iter()
        .filter(|s| platform_obstacle(&s.backend).is_none())
        .collect()
}

/// [`default_specs`] for a command that takes them because no target was named (`matrix`,
/// `pipeline`), said on stderr with their ids.
pub fn default_specs_said() -> Vec<TargetSpec> {
    let specs = default_specs();
    let ids: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
    crate::foundation::console::note(format_args!(
        "no --target given: auditing every target this machine can run ({})",
        ids.join(", ")
    ));
    specs
}

/// The baseline's id: the CPU EP on the same quantized model without graph rewrites.
pub const BASELINE_ID: &str = "cpu:noopt";

/// The targets asked for (or the defaults), runs each on the releases `releases`
/// lists for its family (the policy's `[runtime]`) unless it names one, and adds the baseline.
pub fn targets(
    asked: Option<&[TargetSpec]>,
    allow_failure: &[crate::data::target::TargetPattern],
    add_baseline: bool,
    releases: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<Requested>> {
    let explicit = asked.is_some();
    let specs = match asked {
        Some(specs) => specs.to_vec(),
        None => default_specs(),
    };
    let specs = expand_releases(on_policy_releases(specs, releases))?;
    let mut out: Vec<Requested> = specs
        .into_iter()
        .map(|spec| {
            let required = explicit && !allow_failure.iter().any(|p| p.names(&spec.id));
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

/// Each target without a release, on every release `releases` lists for its family.
fn on_policy_releases(specs: Vec<TargetSpec>, releases: &BTreeMap<String, Vec<String>>) -> Vec<TargetSpec> {
    specs
        .into_iter()
        .flat_map(|spec| match (&spec.release, releases.get(family_of(&spec.backend))) {
            (None, Some(versions)) => versions
                .iter()
                .map(|v| {
                    spec.clone().with_release(ReleaseSpec::Version {
                        version: v.clone(),
                        host: None,
                    })
                })
                .collect(),
            _ => vec![spec],
        })
        .collect()
}

/// Expands `@all` into every release of the target's build that runs here, and checks that
/// every named release is in the catalogue (a typo should not wait for the model to load).
pub fn expand_releases(specs: Vec<TargetSpec>) -> Result<Vec<TargetSpec>> {
    let mut out: Vec<TargetSpec> = Vec::new();
    for spec in specs {
        let expanded = match spec.release {
            Some(ReleaseSpec::All) => {
                let releases = releases_here(&spec.backend);
                if releases.is_empty() {
                    return Err(bad_flag(format!(
                        "target '{}': no release of it runs on this machine",
                        spec.id
                    )));
                }
                releases
                    .into_iter()
                    .map(|b| {
                        spec.clone().with_release(ReleaseSpec::Version {
                            version: b.version.clone(),
                            host: None,
                        })
                    })
                    .collect()
            }
            _ => vec![spec],
        };
        for s in expanded {
            if s.release.is_some() {
                builds_for(&s).map_err(bad_flag)?;
            }
            if !out.iter().any(|o| o.id == s.id) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

/// What the catalogue says about the release a target runs on, when it is worth a note: a plugin
/// on a core it was found to fail on.
pub fn release_note(spec: &TargetSpec) -> Option<String> {
    let (host, plugin) = builds_for(spec).ok()?;
    let refusal = plugin?.refusal_on(&host.version)?;
    Some(format!(
        "{}: the catalogue records that {} fails on {} at {}: \"{}\" ({}); it runs anyway, to report the runtime's own words",
        spec.id,
        plugin?.label(),
        host.label(),
        refusal.phase,
        refusal.error,
        plugin?.measured.clone().unwrap_or_else(|| "measured".into())
    ))
}

/// Finds (or fetches) the runtimes of every target, once per build.
pub fn provision(targets: Vec<Requested>, provisioner: &Provisioner) -> Result<Vec<PlannedTarget>> {
    let mut cache: HashMap<String, Result<Runtime, String>> = HashMap::new();
    let mut get = |b: &'static Build| -> Result<Result<Runtime, String>> {
        if let Some(r) = cache.get(&b.label()) {
            return Ok(r.clone());
        }
        let r = match provisioner.get(b) {
            Ok(rt) => Ok(rt),
            Err(e) => {
                // A bad --runtime flag is the user's error; a missing download is a finding.
                if matches!(
                    e.downcast_ref(),
                    Some(crate::foundation::error::RuntimeError::BadChoice(_))
                ) {
                    return Err(e);
                }
                Err(crate::foundation::error::one_line(&e))
            }
        };
        cache.insert(b.label(), r.clone());
        Ok(r)
    };
    let mut planned = Vec::with_capacity(targets.len());
    for Requested { spec, role, required } in targets {
        let runtime = match (platform_obstacle(&spec.backend), builds_for(&spec)) {
            (Some(reason), _) | (None, Err(reason)) => Err(reason),
            (None, Ok((host, plugin))) => match get(host)? {
                Err(e) => Err(e),
                Ok(h) => match plugin.map(&mut get).transpose()? {
                    Some(Err(e)) => Err(e),
                    Some(Ok(p)) => Ok(TargetRuntime {
                        host: h,
                        plugin: Some(p),
                        emulation: None,
                    }),
                    None => Ok(TargetRuntime {
                        host: h,
                        plugin: None,
                        emulation: None,
                    }),
                },
            },
        };
        let runtime = runtime.and_then(|mut rt| {
            if matches!(spec.backend, crate::data::target::Backend::Arm64 { .. }) {
                rt.emulation = Some(crate::execution::runtime::emulation::provision()?);
            }
            Ok(rt)
        });
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
        let asked = parse_targets(&["cpu".into(), "qnn:sm8650".into(), "qnn:sm8350".into()]).unwrap();
        let t = targets(
            Some(&asked),
            &[crate::data::target::TargetPattern::parse("qnn:sm83*").unwrap()],
            true,
            &Default::default(),
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
        let asked = parse_targets(&["cpu:noopt".into()]).unwrap();
        let t = targets(Some(&asked), &[], true, &Default::default()).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].role, TargetRole::Target);
    }
}
