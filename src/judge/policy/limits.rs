//! Gate limits with where each was set, how more specific sections override broader ones, and
//! which kinds of audit apply each (one table for every kind: a limit a kind does not apply is
//! said, never silently skipped).

use crate::report::common::ReportKind;

/// One limit and where it was set (`npu-audit.toml:12`, `--min-sqnr`).
#[derive(Debug, Clone, PartialEq)]
pub struct Limit<T> {
    pub value: T,
    pub origin: String,
    /// Set for this output by name (not for every output of a target): a top-1 limit set this
    /// way also fails outputs that have no class axis, instead of skipping them.
    pub per_output: bool,
}

impl<T> Limit<T> {
    /// A limit set for every output (or for the whole target) at `origin`.
    pub fn new(value: T, origin: impl Into<String>) -> Limit<T> {
        Limit {
            value,
            origin: origin.into(),
            per_output: false,
        }
    }
}

/// Every limit a gate knows; `None` = not set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limits {
    pub min_sqnr_db: Option<Limit<f64>>,
    pub max_abs: Option<Limit<f64>>,
    pub min_top1_agreement: Option<Limit<f64>>,
    pub require_bit_exact: Option<Limit<bool>>,
    /// Baseline mode: dB of SQNR an output may lose against the previous report.
    pub max_sqnr_regression_db: Option<Limit<f64>>,
    /// Baseline mode: how much an output's max abs error may grow.
    pub max_abs_regression: Option<Limit<f64>>,
    /// Baseline mode: how much top-1 agreement (a fraction) may drop.
    pub max_top1_regression: Option<Limit<f64>>,
    pub max_fallback_nodes: Option<Limit<u64>>,
    pub max_partitions: Option<Limit<u64>>,
    pub fail_on_fallback: Option<Limit<bool>>,
    /// Baseline mode: how many more compute nodes may fall back, and how many more partitions.
    pub max_fallback_regression: Option<Limit<u64>>,
    pub max_partitions_regression: Option<Limit<u64>>,
    /// Per-layer audit: dB of SQNR against the golden run any layer may lose against the
    /// baseline on the same layer (the SQNR-loss level of the layer summary).
    pub max_layer_sqnr_loss_db: Option<Limit<f64>>,
    /// Stream: the fraction of steps whose decision must agree with the golden stream's.
    pub min_decision_agreement: Option<Limit<f64>>,
    /// Stream: the last step at which the fed-back state falling below the divergence SQNR
    /// fails the target (it must stay above it through this step).
    pub max_divergence_step: Option<Limit<u64>>,
    /// Eval: the lowest accuracy (a fraction) a target may score on the set.
    pub min_accuracy: Option<Limit<f64>>,
    /// Eval: the most points of the primary metric a target may lose against the reference,
    /// judged as non-inferiority (the drop's one-sided 95% upper bound within it).
    pub max_accuracy_drop: Option<Limit<f64>>,
    /// Corpus drift (`--task score`): the most mean KL divergence (nats) from the reference's
    /// next-token distributions, judged on its one-sided 95% upper bound.
    pub max_kld_mean: Option<Limit<f64>>,
    /// Corpus drift: the most 99th percentile KL divergence (nats).
    pub max_kld_p99: Option<Limit<f64>>,
    /// Corpus drift: the least share of positions whose top token is the reference's.
    pub min_same_top: Option<Limit<f64>>,
    /// Corpus drift: the most PPL target / PPL reference.
    pub max_ppl_ratio: Option<Limit<f64>>,
}

/// Applies `$f` to every field name of [`Limits`].
macro_rules! each_limit {
    ($m:ident) => {
        $m!(
            min_sqnr_db,
            max_abs,
            min_top1_agreement,
            require_bit_exact,
            max_sqnr_regression_db,
            max_abs_regression,
            max_top1_regression,
            max_fallback_nodes,
            max_partitions,
            fail_on_fallback,
            max_fallback_regression,
            max_partitions_regression,
            max_layer_sqnr_loss_db,
            min_decision_agreement,
            max_divergence_step,
            min_accuracy,
            max_accuracy_drop,
            max_kld_mean,
            max_kld_p99,
            min_same_top,
            max_ppl_ratio
        )
    };
}

/// Which kinds of audit apply each limit, by its name in the policy file. Every field of
/// [`Limits`] is here (a test holds the two together).
pub const APPLIED_BY: &[(&str, &[ReportKind])] = {
    use ReportKind::{Compare, Eval, Generation, Matrix};
    &[
        ("min_sqnr_db", &[Compare, Matrix]),
        ("max_abs", &[Compare, Matrix]),
        ("min_top1_agreement", &[Compare, Matrix]),
        ("require_bit_exact", &[Compare, Matrix]),
        ("max_sqnr_regression_db", &[Compare]),
        ("max_abs_regression", &[Compare]),
        ("max_top1_regression", &[Compare]),
        ("max_fallback_nodes", &[Compare]),
        ("max_partitions", &[Compare]),
        ("fail_on_fallback", &[Compare]),
        ("max_fallback_regression", &[Compare]),
        ("max_partitions_regression", &[Compare]),
        ("max_layer_sqnr_loss_db", &[Compare]),
        ("min_decision_agreement", &[Compare]),
        ("max_divergence_step", &[Compare]),
        ("min_accuracy", &[Eval, Generation, Matrix]),
        ("max_accuracy_drop", &[Eval, Generation, Matrix]),
        ("max_kld_mean", &[Generation]),
        ("max_kld_p99", &[Generation]),
        ("min_same_top", &[Generation]),
        ("max_ppl_ratio", &[Generation]),
    ]
};

/// The kinds of audit that apply the limit of this name (none for an unknown name).
pub fn applied_by(name: &str) -> &'static [ReportKind] {
    APPLIED_BY
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[], |(_, kinds)| *kinds)
}

impl Limits {
    /// Every limit set, by name, with where it was set, in field order.
    pub fn set(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        macro_rules! collect {
            ($($f:ident),*) => {$(
                if let Some(l) = &self.$f {
                    out.push((stringify!($f), l.origin.clone()));
                }
            )*};
        }
        each_limit!(collect);
        out
    }

    /// The limits set that an audit of `kind` does not apply, by name, with where each was set.
    pub fn not_applied_by(&self, kind: ReportKind) -> Vec<(&'static str, String)> {
        self.set()
            .into_iter()
            .filter(|(name, _)| !applied_by(name).contains(&kind))
            .collect()
    }

    /// Replaces every limit `other` sets.
    pub fn overlay(&mut self, other: &Limits) {
        macro_rules! take {
            ($($f:ident),*) => {$(
                if other.$f.is_some() {
                    self.$f = other.$f.clone();
                }
            )*};
        }
        each_limit!(take);
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        macro_rules! none {
            ($($f:ident),*) => { true $(&& self.$f.is_none())* };
        }
        each_limit!(none)
    }

    /// `name = value (origin)` for every limit set, in field order.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        macro_rules! show {
            ($($f:ident),*) => {$(
                if let Some(l) = &self.$f {
                    out.push(format!("{} = {} ({})", stringify!($f), l.value, l.origin));
                }
            )*};
        }
        each_limit!(show);
        out
    }

    /// Marks every limit as set for one output by name.
    pub fn mark_per_output(&mut self) {
        macro_rules! mark {
            ($($f:ident),*) => {$(
                if let Some(l) = &mut self.$f {
                    l.per_output = true;
                }
            )*};
        }
        each_limit!(mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit<T>(value: T, origin: &str) -> Option<Limit<T>> {
        Some(Limit::new(value, origin))
    }

    #[test]
    fn every_limit_is_in_the_table_of_kinds_and_only_they() {
        let mut names = Vec::new();
        macro_rules! name {
            ($($f:ident),*) => {$( names.push(stringify!($f)); )*};
        }
        each_limit!(name);
        let table: Vec<&str> = APPLIED_BY.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, table);
        assert!(APPLIED_BY.iter().all(|(_, kinds)| !kinds.is_empty()));
        let l = Limits {
            min_sqnr_db: limit(30.0, "a:1"),
            min_accuracy: limit(0.9, "a:2"),
            ..Limits::default()
        };
        assert_eq!(
            l.not_applied_by(ReportKind::Generation),
            vec![("min_sqnr_db", "a:1".to_string())]
        );
        assert_eq!(
            l.not_applied_by(ReportKind::Compare),
            vec![("min_accuracy", "a:2".to_string())]
        );
        assert!(l.not_applied_by(ReportKind::Matrix).is_empty());
    }

    #[test]
    fn overlay_replaces_only_what_is_set() {
        let mut base = Limits {
            min_sqnr_db: limit(30.0, "a:1"),
            max_abs: limit(0.1, "a:2"),
            ..Limits::default()
        };
        base.overlay(&Limits {
            max_abs: limit(0.5, "b:7"),
            max_partitions: limit(2, "b:8"),
            ..Limits::default()
        });
        assert_eq!(base.min_sqnr_db, limit(30.0, "a:1"));
        assert_eq!(base.max_abs, limit(0.5, "b:7"));
        assert_eq!(base.max_partitions, limit(2, "b:8"));
        assert!(!base.is_empty());
        assert!(Limits::default().is_empty());
        assert_eq!(
            base.describe(),
            vec![
                "min_sqnr_db = 30 (a:1)",
                "max_abs = 0.5 (b:7)",
                "max_partitions = 2 (b:8)"
            ]
        );
    }
}
