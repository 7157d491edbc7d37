//! The bundle's files: the model cut out and run alone (scrubbed when asked), its inputs and
//! their float twins, each side's expected outputs, and what a vendor reads and runs without
//! npu-audit (`README.md`, `run.py` with `bundle.json`, pinned `requirements.txt`).

use std::collections::HashMap;

use anyhow::Result;
use prost::Message;
use serde_json::json;

use super::bundle::{standalone, RUN_PY};
use super::graph::{Layered, Window};
use super::verify::{bundle_inputs, expected_name, listed, npz, run_bundle, scrubbed, BundleRun};
use super::windows::{Against, Evaluator, Judged};
use super::ReproOptions;
use crate::analyses::layers::tap::Unit;
use crate::commands::compare::plan::AuditPlan;
use crate::data::model::pb::ModelProto;
use crate::data::model::slice::MeasuredType;
use crate::data::target::{Backend, OptLevel, TargetSpec};
use crate::data::tensor::Tensor;
use crate::execution::exec::PlannedTarget;
use crate::report::repro::{BundleReport, ChipsetInfo, ScrubReport, TargetSide};

/// The NumPy release `run.py` is pinned to (the one the project's own checks use).
const NUMPY: &str = "numpy==2.4.6";

/// The largest ONNX file (protobuf refuses messages of 2 GiB and more).
const MAX_ONNX_FILE: usize = (2 << 30) - 1;

/// A bundle made and run alone: its report and its files (`repro.json` is added when written).
pub struct Made {
    pub report: BundleReport,
    pub files: Vec<(String, Vec<u8>)>,
}

/// How the report describes a target.
pub fn side(t: &PlannedTarget) -> TargetSide {
    TargetSide {
        id: t.spec.id.clone(),
        runtime: t
            .runtime
            .as_ref()
            .ok()
            .map(|rt| crate::commands::compare::facts::target_runtime_info(rt, None, &mut |r| r.sha256.clone())),
        ep_options: t.spec.ep_options(),
        chipset: match &t.spec.backend {
            Backend::Qnn(c) => Some(ChipsetInfo {
                sm: c.sm.to_string(),
                marketing: c.marketing.to_string(),
                soc_model: c.soc_model,
                htp_arch: c.htp_arch,
            }),
            _ => None,
        },
    }
}

/// The golden comparison as a side.
pub fn golden_side() -> TargetSide {
    TargetSide {
        id: "golden".into(),
        runtime: None,
        ep_options: Vec::new(),
        chipset: None,
    }
}

/// Cuts the window out, runs it alone (and scrubbed), and lays out the bundle's files.
pub(super) fn make(
    opts: &ReproOptions,
    plan: &AuditPlan,
    eval: &mut Evaluator<'_>,
    window: Window,
    judged: &Judged,
) -> Result<Made> {
    let layered = eval.layered;
    let unit = layered.unit(window);
    let sample = judged.worst_sample;
    let (fed, floats) = bundle_inputs(eval, &unit.inputs, sample)?;
    let proto = cut(plan, layered, window, &unit, &fed)?;
    let work = eval.executor.work().join("repro");
    let run = run_bundle(eval, &proto, &fed, sample, &unit.outputs, &work.join("bundle"))?;
    let mut kept = Kept {
        proto,
        run,
        golden_applies: true,
    };
    let scrub = match opts.scrub_seed {
        Some(seed) => Some(scrub_weights(
            eval,
            seed,
            &mut kept,
            &fed,
            sample,
            &unit.outputs,
            &work,
        )?),
        None => None,
    };
    let Kept {
        proto,
        run,
        golden_applies,
    } = kept;
    let golden: Vec<(String, Tensor)> = if golden_applies {
        unit.outputs
            .iter()
            .map(|t| Ok((t.clone(), eval.golden_output(sample, t)?)))
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    let model_bytes = proto.encode_to_vec();
    let parts = Parts {
        window,
        run: &run,
        model: model_bytes.clone(),
        fed: &fed,
        floats: &floats,
        golden: &golden,
    };
    let files = layout(opts, plan, eval, parts)?;
    Ok(Made {
        report: BundleReport {
            path: String::new(),
            reproduces: run.reproduces,
            outputs: run.outputs.clone(),
            files: listed(&files),
            model_bytes: model_bytes.len() as u64,
            source_model_bytes: plan.model.total_bytes(),
            scrubbed: scrub,
            target_placement: run.placement.clone(),
        },
        files,
    })
}

/// A scrub that was not tried, and why.
fn unscrubbed(seed: u64, why: &str) -> ScrubReport {
    ScrubReport {
        seed,
        replaced: Vec::new(),
        reproduces: false,
        outputs: Vec::new(),
        note: Some(format!("not tried: {why}")),
    }
}

/// What a bundle holds besides its description.
struct Parts<'p> {
    window: Window,
    run: &'p BundleRun,
    model: Vec<u8>,
    fed: &'p [(String, Tensor)],
    floats: &'p [(String, Tensor)],
    golden: &'p [(String, Tensor)],
}

/// The bundle's model and its run alone, as the bundle will carry them.
struct Kept {
    proto: ModelProto,
    run: BundleRun,
    /// Whether the golden activations describe the model (not with scrubbed weights).
    golden_applies: bool,
}

/// The window cut out as a model of its own, its inputs typed as fed; refused over 2 GiB.
fn cut(
    plan: &AuditPlan,
    layered: &Layered,
    window: Window,
    unit: &Unit,
    fed: &[(String, Tensor)],
) -> Result<ModelProto> {
    let types: HashMap<String, MeasuredType> = fed
        .iter()
        .map(|(n, t)| {
            let ty = MeasuredType {
                elem_type: t.dtype().onnx_code(),
                shape: t.shape.clone(),
            };
            (n.clone(), ty)
        })
        .collect();
    let dir = plan.model.path.parent().unwrap_or(std::path::Path::new("."));
    let proto = standalone(layered, unit, &types, dir)?;
    if proto.encoded_len() > MAX_ONNX_FILE {
        return Err(crate::foundation::error::bad_model(format!(
            "the window {} holds {} bytes of weights: over 2 GiB, the most one ONNX file holds; name a smaller window's last layer with --layer",
            super::describe(layered, window),
            proto.encoded_len()
        )));
    }
    Ok(proto)
}

/// `--scrub-weights`: the scrubbed model run alone, kept in place of the real one when it
/// still departs; what was done, either way.
#[allow(clippy::too_many_arguments)]
fn scrub_weights(
    eval: &mut Evaluator<'_>,
    seed: u64,
    kept: &mut Kept,
    fed: &[(String, Tensor)],
    sample: usize,
    outputs: &[String],
    work: &std::path::Path,
) -> Result<ScrubReport> {
    Ok(match (&eval.against, kept.run.reproduces) {
        (Against::Golden, _) => unscrubbed(seed, "--against golden compares with the real weights' activations"),
        (_, false) => unscrubbed(seed, "the bundle does not reproduce with its real weights"),
        (Against::Target(_), true) => {
            let (model, report, run) = scrubbed(eval, &kept.proto, seed, fed, sample, outputs, &work.join("scrubbed"))?;
            if report.reproduces {
                *kept = Kept {
                    proto: model,
                    run,
                    golden_applies: false,
                };
            }
            report
        }
    })
}

/// Every file of the bundle but `repro.json`, in the order a reader meets them.
fn layout(
    opts: &ReproOptions,
    plan: &AuditPlan,
    eval: &Evaluator<'_>,
    parts: Parts<'_>,
) -> Result<Vec<(String, Vec<u8>)>> {
    let Parts {
        window,
        run,
        model,
        fed,
        floats,
        golden,
    } = parts;
    let config = bundle_json(plan, eval, run, !golden.is_empty())?;
    let mut files = vec![
        (
            "README.md".to_string(),
            readme(opts, plan, eval, run, window).into_bytes(),
        ),
        ("model.onnx".to_string(), model),
        ("inputs.npz".to_string(), npz(fed)?),
        ("inputs_float.npz".to_string(), npz(floats)?),
    ];
    if !golden.is_empty() {
        files.push(("expected/golden.npz".to_string(), npz(golden)?));
    }
    let ids = sides(plan, eval);
    for (tensors, id) in run.tensors.iter().zip(&ids) {
        files.push((expected_name(id), npz(tensors)?));
    }
    files.push((
        "bundle.json".into(),
        (serde_json::to_string_pretty(&config)? + "\n").into_bytes(),
    ));
    files.push(("run.py".into(), RUN_PY.as_bytes().to_vec()));
    files.push(("requirements.txt".into(), requirements(plan, eval).into_bytes()));
    Ok(files)
}

/// The ids of the sides that run, target first.
fn sides(plan: &AuditPlan, eval: &Evaluator<'_>) -> Vec<String> {
    let mut ids = vec![plan.targets[0].spec.id.clone()];
    if let Against::Target(a) = eval.against {
        ids.push(a.spec.id.clone());
    }
    ids
}

/// How `run.py` runs one side (`stored`: it reads the side's outputs from `expected/` instead).
fn side_config(spec: &TargetSpec, threads: usize, runnable: bool) -> serde_json::Value {
    let kind = match spec.backend {
        _ if !runnable => "stored",
        Backend::Qnn(_) => "qnn",
        Backend::Cpu => "cpu",
        _ => "other",
    };
    let opt = match spec.opt {
        OptLevel::Disable => "disable",
        OptLevel::Basic => "basic",
        OptLevel::Extended => "extended",
        OptLevel::All => "all",
    };
    let session: serde_json::Map<String, serde_json::Value> = spec
        .options
        .iter()
        .filter(|(k, _)| k.starts_with("session."))
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    let ep: serde_json::Map<String, serde_json::Value> =
        spec.ep_options().into_iter().map(|(k, v)| (k, v.into())).collect();
    json!({
        "id": spec.id,
        "kind": kind,
        "opt": opt,
        "threads": threads,
        "ep_options": ep,
        "session_config": session,
        "expected": expected_name(&spec.id),
    })
}

/// `bundle.json`: the sides, each output's quantization, the criterion and the figures the tool
/// measured, which `run.py` reads.
fn bundle_json(plan: &AuditPlan, eval: &Evaluator<'_>, run: &BundleRun, golden: bool) -> Result<serde_json::Value> {
    let threads = eval.executor.threads();
    let against = match eval.against {
        Against::Target(a) => side_config(&a.spec, threads, runs_beside(&plan.targets[0], a)),
        Against::Golden => json!({"id": "golden", "kind": "golden"}),
    };
    let outputs: Vec<serde_json::Value> = run
        .outputs
        .iter()
        .map(|f| {
            let quant = eval.layered.point_of_tensor(&f.tensor).and_then(|p| p.quant);
            let q = quant.and_then(|q| {
                let dtype = crate::data::tensor::DType::from_onnx(q.elem_type)?;
                Some(json!({"scale": q.scale, "zero_point": q.zero_point, "dtype": dtype.name()}))
            });
            json!({"name": f.tensor, "quant": q})
        })
        .collect();
    Ok(json!({
        "target": side_config(&plan.targets[0].spec, threads, true),
        "against": against,
        "criterion": eval.criterion,
        "outputs": outputs,
        "figures": run.outputs,
        "golden": golden,
        "target_fails": run.error.is_some() && run.reproduces,
    }))
}

/// The packages (name, version) a target's runtime ships in: host build, then plugin.
fn packages(t: &PlannedTarget) -> Vec<(String, Option<String>)> {
    let Ok(rt) = &t.runtime else { return Vec::new() };
    std::iter::once(&rt.host)
        .chain(rt.plugin.as_ref())
        .map(|r| (r.package.clone(), r.version.clone()))
        .collect()
}

/// Whether the comparison can run in the target's environment: none of its packages is pinned
/// there at another version (a release regression's older plugin is not).
fn runs_beside(target: &PlannedTarget, against: &PlannedTarget) -> bool {
    let pinned = packages(target);
    packages(against)
        .iter()
        .all(|(name, v)| pinned.iter().all(|(n, w)| n != name || w == v))
}

/// Pinned packages: NumPy and the target's runtime (host build and plugin), and the
/// comparison's when it can share the environment.
fn requirements(plan: &AuditPlan, eval: &Evaluator<'_>) -> String {
    let mut lines = vec![
        "# What run.py needs, pinned to the releases the bundle was made with.".to_string(),
        NUMPY.to_string(),
    ];
    let target = &plan.targets[0];
    let mut sides = vec![target];
    if let Against::Target(a) = eval.against {
        if runs_beside(target, a) {
            sides.push(a);
        } else {
            lines.push(format!(
                "# {} ran on {}: not installable beside the target's runtime; its outputs are in {}",
                a.spec.id,
                packages(a)
                    .iter()
                    .map(|(n, v)| format!("{n} {}", v.as_deref().unwrap_or("?")))
                    .collect::<Vec<_>>()
                    .join(" + "),
                expected_name(&a.spec.id)
            ));
        }
    }
    for (name, version) in sides.into_iter().flat_map(packages) {
        let pin = match version {
            Some(v) => format!("{name}=={v}"),
            None => format!("# {name} (a build given on the command line; version unknown)"),
        };
        if !lines.contains(&pin) {
            lines.push(pin);
        }
    }
    lines.join("\n") + "\n"
}

/// The bundle's README: what is expected and what is observed, on which runtimes, and how to
/// run it.
fn readme(opts: &ReproOptions, plan: &AuditPlan, eval: &Evaluator<'_>, run: &BundleRun, window: Window) -> String {
    let target = side(&plan.targets[0]);
    let against = match eval.against {
        Against::Target(a) => a.spec.id.clone(),
        Against::Golden => "the golden activations quantized as the model quantizes them".into(),
    };
    let mut md = format!("# Reproduction: {} departs from {against}\n\n", target.id);
    md += &format!(
        "Made by npu-audit {} from `{}` (SHA-256 `{}`). This model is the smallest window of consecutive layers of that model \
         whose run on {} departs from {against}: {}.\n\n",
        env!("CARGO_PKG_VERSION"),
        plan.model.path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
        plan.model.sha256,
        target.id,
        eval.criterion.text
    );
    md += &format!(
        "The window: {}. Each side ran it with graph optimizations as its target id says (`cpu:noopt`: none; otherwise all) and {} intra-op thread(s).\n\n",
        super::describe(eval.layered, window),
        eval.executor.threads()
    );
    md += "## Expected and observed\n\nExpected: the target computes what the comparison computes, within rounding.\n\nObserved:\n\n";
    for f in &run.outputs {
        md += &format!("- {}\n", f.sentence());
    }
    if let Some(e) = &run.error {
        md += &format!("- the run failed: {e}\n");
    }
    for p in &run.placement {
        md += &format!(
            "- on {}, {} ran {} node(s): {}\n",
            plan.targets[0].spec.id,
            p.ep,
            p.nodes.len(),
            p.nodes.join(", ")
        );
    }
    md += &runtimes_section(&target, plan);
    md += &format!(
        "\n## Files\n\n- `model.onnx`: the window, with only its own weights{} and the opset imports of the source.\n\
         - `inputs.npz`: its inputs as the model feeds them (codes where it reads codes), from the float reference's run of one sample; \
         `inputs_float.npz`: their float twins.\n\
         - `expected/golden.npz`: the float reference's activations at the outputs; `expected/<target>.npz`: what each side returned here.\n\
         - `run.py`, `bundle.json`, `requirements.txt`: the check, without npu-audit.\n\n\
         ## Run it\n\n```sh\npython3 -m venv venv && venv/bin/pip install -r requirements.txt\nvenv/bin/python run.py\n```\n\n\
         It prints each output's figures as above and `REPRODUCED` when the departure shows (exit 0; 1 when it does not).\n",
        if opts.scrub_seed.is_some() { " (scrubbed when the report says so)" } else { "" }
    );
    md
}

/// Chipset, runtimes, EP options and host.
fn runtimes_section(target: &TargetSide, plan: &AuditPlan) -> String {
    let mut md = String::from("\n## Where\n\n");
    if let Some(c) = &target.chipset {
        md += &format!(
            "- chipset: {} (Snapdragon {}), soc_model {}, htp_arch {}\n",
            c.sm, c.marketing, c.soc_model, c.htp_arch
        );
    }
    for t in &plan.targets {
        if let Ok(rt) = &t.runtime {
            let plugin = rt
                .plugin
                .as_ref()
                .map(|p| format!(", plugin {} {}", p.package, p.version.as_deref().unwrap_or("?")))
                .unwrap_or_default();
            let options: Vec<String> = t.spec.ep_options().iter().map(|(k, v)| format!("{k}={v}")).collect();
            md += &format!(
                "- {}: {} {}{plugin}; EP options: {}\n",
                t.spec.id,
                rt.host.package,
                rt.host.version.as_deref().unwrap_or("?"),
                if options.is_empty() {
                    "none".to_string()
                } else {
                    options.join(", ")
                }
            );
        }
    }
    let host = crate::foundation::host::this_host();
    md += &format!(
        "- host: {} ({}, {}; {})\n",
        host.cpu,
        host.os,
        host.arch,
        host.isa.join(" ")
    );
    md
}
