//! What to ship where: the variants' cost order, and per target the cheapest variant whose cell
//! meets the policy (on the target's own accelerator first, then on the CPU), or the closest one
//! when none does; and the dispatch table an app loads.

use super::cells::rank_figure;
use crate::report::matrix::{Cell, VariantInfo};
pub use crate::report::matrix::{Closest, Dispatch, DispatchEntry, Recommendation};
use crate::report::RunStatus;

/// How a variant computes, read off its graph and options: the default cost order is
/// `int8 < a16w8 < fp16 < fp32` (then the order given on the command line).
pub fn precision_class(model: &crate::data::model::pb::ModelProto, options: &[(String, String)]) -> (&'static str, u8) {
    let graph = model.graph.as_ref();
    let consts = graph.map(crate::data::model::constant::constants).unwrap_or_default();
    let q_types: Vec<i32> = graph
        .into_iter()
        .flat_map(|g| &g.node)
        .filter(|n| n.op_type.as_deref() == Some("QuantizeLinear"))
        .filter_map(|n| n.input.get(2).and_then(|zp| consts.get(zp)).and_then(|t| t.data_type))
        .collect();
    let fp16 = options
        .iter()
        .any(|(k, v)| k.ends_with("enable_htp_fp16_precision") && v == "1");
    if q_types.iter().any(|&t| t == 4 || t == 5) {
        ("a16w8", 1)
    } else if !q_types.is_empty() {
        ("int8", 0)
    } else if fp16 {
        ("fp16", 2)
    } else {
        ("fp32", 3)
    }
}

/// The cost order: `order` as given (every variant named once), else by precision class, ties
/// in command-line order.
pub fn cost_order(variants: &[VariantInfo], order: &[String]) -> Vec<String> {
    if !order.is_empty() {
        return order.to_vec();
    }
    let mut v: Vec<(u8, usize, &str)> = variants
        .iter()
        .enumerate()
        .map(|(i, x)| (x.cost_rank, i, x.name.as_str()))
        .collect();
    v.sort();
    v.into_iter().map(|(_, _, n)| n.to_string()).collect()
}

/// The first cell in cost order on `target` that meets the policy.
fn cheapest<'a>(cells: &'a [Cell], order: &[String], target: &str) -> Option<&'a Cell> {
    order
        .iter()
        .filter_map(|v| cells.iter().find(|c| c.variant == *v && c.target == target))
        .find(|c| c.meets_policy)
}

/// One recommendation per target in `targets`: the cheapest passing variant there; failing
/// that, the cheapest that passes on the `cpu` target (running on the CPU is the most expensive
/// remedy); failing that, none, with the closest cell.
pub fn recommend(cells: &[Cell], order: &[String], targets: &[String]) -> Vec<Recommendation> {
    targets
        .iter()
        .map(|t| {
            if let Some(c) = cheapest(cells, order, t) {
                return chosen(t, c, t, format!("the cheapest variant that meets the policy on {t}"));
            }
            let cpu = targets.iter().find(|x| *x == "cpu" && *x != t);
            if let Some(c) = cpu.and_then(|cpu| cheapest(cells, order, cpu)) {
                let why = format!("no variant meets the policy on {t}; {} does on the CPU", c.variant);
                return chosen(t, c, "cpu", why);
            }
            none_meets(cells, t)
        })
        .collect()
}

fn chosen(target: &str, c: &Cell, run_on: &str, reason: String) -> Recommendation {
    Recommendation {
        target: target.to_string(),
        variant: Some(c.variant.clone()),
        run_on: Some(run_on.to_string()),
        sqnr_db: c.sqnr_db,
        closest: None,
        reason,
        remedy: None,
    }
}

fn none_meets(cells: &[Cell], target: &str) -> Recommendation {
    let best = cells
        .iter()
        .filter(|c| c.target == target && c.status == RunStatus::Ok)
        .max_by(|a, b| rank_figure(a).total_cmp(&rank_figure(b)));
    Recommendation {
        target: target.to_string(),
        variant: None,
        run_on: None,
        sqnr_db: None,
        closest: best.map(|c| Closest {
            variant: c.variant.clone(),
            sqnr_db: c.sqnr_db,
            failed_rules: c.failed_rules.clone(),
        }),
        reason: match best {
            Some(c) => format!("none meets the policy; closest: {}", c.variant),
            None => "no variant ran".into(),
        },
        remedy: None,
    }
}

/// Adds to each recommendation the searches whose final candidate meets the policy on its target
/// and is built from a variant cheaper than the one recommended (or when none is).
pub fn add_remedies(recs: &mut [Recommendation], searches: &[super::remedy::RemedySearch], order: &[String]) {
    let rank = |v: &str| order.iter().position(|o| o == v).unwrap_or(usize::MAX);
    for r in recs.iter_mut() {
        let chosen = r
            .variant
            .as_deref()
            .filter(|_| r.run_on.as_deref() == Some(r.target.as_str()));
        let fixes: Vec<String> = searches
            .iter()
            .filter(|s| chosen.is_none_or(|c| rank(&s.variant) < rank(c)))
            .filter_map(|s| {
                let cell = s.cells.iter().find(|c| c.target == r.target && c.meets_policy)?;
                Some(format!(
                    "{} with {} {} meets it at {} dB",
                    s.variant,
                    s.changed.join(", "),
                    super::remedy::kind_phrase(s.kind),
                    cell.sqnr_db.map_or("-".into(), |v| format!("{:.2}", v.0))
                ))
            })
            .collect();
        if !fixes.is_empty() {
            r.remedy = Some(fixes.join("; "));
        }
    }
}

/// The dispatch table of `recs` over the matrix's columns `specs`.
pub fn dispatch(
    recs: &[Recommendation],
    cells: &[Cell],
    (variants, specs): (&[VariantInfo], &[crate::data::target::TargetSpec]),
    policy: Vec<String>,
) -> Dispatch {
    let mut entries = Vec::new();
    let mut unresolved = Vec::new();
    for r in recs {
        let (Some(v), Some(on)) = (&r.variant, &r.run_on) else {
            unresolved.push(r.target.clone());
            continue;
        };
        let Some(cell) = cells.iter().find(|c| c.variant == *v && c.target == *on) else {
            continue;
        };
        let Some(info) = variants.iter().find(|x| x.name == *v) else {
            continue;
        };
        let column = |id: &str| specs.iter().find(|s| s.id == id);
        // The device's chipset (what an app looks up), which stays the target's own when the
        // choice is to run on its CPU.
        let chip = column(&r.target).and_then(|s| s.chipset());
        let spec = column(on);
        entries.push(DispatchEntry {
            target: r.target.clone(),
            chipset: chip.map(|c| c.sm.to_string()),
            soc_model: chip.map(|c| c.soc_model),
            variant: v.clone(),
            model: info.path.clone(),
            model_sha256: info.sha256.clone(),
            execution_provider: spec.map_or("", |s| s.backend.ep_name()).to_string(),
            ep_options: cell.options.clone(),
            sqnr_db: cell.sqnr_db,
        });
    }
    Dispatch {
        schema_version: 1,
        policy,
        entries,
        unresolved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::common::Num;
    use std::collections::BTreeMap;

    fn cell(variant: &str, target: &str, sqnr: f64, meets: bool) -> Cell {
        Cell {
            variant: variant.into(),
            target: target.into(),
            status: RunStatus::Ok,
            error: None,
            meets_policy: meets,
            failed_rules: if meets {
                vec![]
            } else {
                vec![format!("min_sqnr_db y: {sqnr} vs 20")]
            },
            worst_output: Some("y".into()),
            sqnr_db: Some(Num(sqnr)),
            max_abs: None,
            top1_agreement: None,
            compute_fallback_nodes: None,
            partitions: None,
            crossing_bytes: None,
            fallback_nodes: vec![],
            model_bytes: 1,
            runtime: None,
            options: BTreeMap::new(),
            task: None,
        }
    }

    #[test]
    fn the_cheapest_passing_variant_then_the_cpu_then_the_closest() {
        let order = vec!["int8".to_string(), "a16w8".to_string()];
        let targets = vec!["qnn:a".to_string(), "qnn:b".to_string(), "cpu".to_string()];
        let cells = vec![
            cell("int8", "qnn:a", 25.0, true),
            cell("a16w8", "qnn:a", 40.0, true),
            cell("int8", "qnn:b", 12.0, false),
            cell("a16w8", "qnn:b", 15.0, false),
            cell("int8", "cpu", 30.0, true),
            cell("a16w8", "cpu", 45.0, true),
        ];
        let recs = recommend(&cells, &order, &targets);
        // qnn:a: int8 passes and is cheaper than a16w8.
        assert_eq!(
            (recs[0].variant.as_deref(), recs[0].run_on.as_deref()),
            (Some("int8"), Some("qnn:a"))
        );
        // qnn:b: nothing passes there; int8 on the CPU does.
        assert_eq!(
            (recs[1].variant.as_deref(), recs[1].run_on.as_deref()),
            (Some("int8"), Some("cpu"))
        );
        // Without a CPU column, none: the closest is a16w8 at 15 dB.
        let recs = recommend(&cells[..4], &order, &targets[..2]);
        assert_eq!(recs[1].variant, None);
        assert_eq!(recs[1].closest.as_ref().map(|c| c.variant.as_str()), Some("a16w8"));
    }

    #[test]
    fn the_default_cost_order_follows_what_each_graph_computes() {
        let info = |name: &str, rank: u8| VariantInfo {
            name: name.into(),
            path: String::new(),
            sha256: String::new(),
            size_bytes: 0,
            precision: String::new(),
            cost_rank: rank,
            options: vec![],
        };
        let v = [info("fp16", 2), info("a16", 1), info("u8", 0), info("u8b", 0)];
        assert_eq!(cost_order(&v, &[]), ["u8", "u8b", "a16", "fp16"]);
        assert_eq!(cost_order(&v, &["fp16".into()]), ["fp16"]);
    }

    #[test]
    fn a_device_sent_to_its_cpu_keeps_its_chipset_in_the_dispatch_table() {
        let order = vec!["int8".to_string()];
        let targets = vec!["qnn:sm8650".to_string(), "cpu".to_string()];
        let cells = vec![cell("int8", "qnn:sm8650", 12.0, false), cell("int8", "cpu", 30.0, true)];
        let recs = recommend(&cells, &order, &targets);
        let info = VariantInfo {
            name: "int8".into(),
            path: "m.onnx".into(),
            sha256: "ab".into(),
            size_bytes: 1,
            precision: "int8".into(),
            cost_rank: 0,
            options: vec![],
        };
        let specs = crate::data::target::parse_targets(&targets).unwrap();
        let d = dispatch(&recs, &cells, (&[info], &specs), vec![]);
        let e = &d.entries[0];
        assert_eq!(
            (e.target.as_str(), e.chipset.as_deref(), e.soc_model),
            ("qnn:sm8650", Some("sm8650"), Some(57))
        );
        assert_eq!(e.execution_provider, "CPUExecutionProvider");
        assert_eq!(e.model, "m.onnx");
    }
}
