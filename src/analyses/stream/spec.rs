//! What `compare --stream` is asked: which outputs feed which inputs on the next step, what a
//! step decides, and when the state counts as diverged. Checked against both models before
//! anything runs.

use anyhow::Result;

use crate::analyses::metrics::{ClassAxisPolicy, Decision};
use crate::data::model::Signature;
use crate::data::tensor::Tensor;
use crate::execution::exec::job::Feedback;
use crate::foundation::error::{bad_flag, bad_input};

/// The SQNR (dB) below which the state counts as diverged when none is chosen: the error's
/// energy a tenth of the state's.
pub const DEFAULT_DIVERGENCE_DB: f64 = 10.0;

/// A stream as asked for on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSpec {
    pub feedback: Vec<Feedback>,
    /// `--decision OUTPUT>THRESHOLD` (or `<`), parsed: threshold decisions.
    pub decisions: Vec<Decision>,
    pub divergence_db: f64,
    pub teacher_forcing: bool,
}

/// `--stream OUT->IN[,OUT->IN...]`, parsed: which outputs feed which inputs on the next step.
#[derive(Debug, Clone, PartialEq)]
pub struct Feeds(pub Vec<Feedback>);

impl Feeds {
    /// Parses `OUT->IN[,OUT->IN...]`; an input fed twice is refused.
    pub fn parse(text: &str) -> Result<Feeds> {
        let mut feedback: Vec<Feedback> = Vec::new();
        for pair in text.split(',') {
            let (output, input) = pair
                .split_once("->")
                .map(|(o, i)| (o.trim(), i.trim()))
                .filter(|(o, i)| !o.is_empty() && !i.is_empty())
                .ok_or_else(|| bad_flag(format!("--stream '{pair}' is not OUTPUT->INPUT (e.g. stateN->state)")))?;
            if feedback.iter().any(|f| f.input == input) {
                return Err(bad_flag(format!("--stream feeds input '{input}' twice")));
            }
            feedback.push(Feedback {
                output: output.into(),
                input: input.into(),
            });
        }
        Ok(Feeds(feedback))
    }
}

impl StreamSpec {
    /// The stream of `--stream` and its other flags, checked: a finite divergence threshold, no
    /// decision twice.
    pub fn new(
        feeds: Feeds,
        decisions: Vec<Decision>,
        divergence_db: f64,
        teacher_forcing: bool,
    ) -> Result<StreamSpec> {
        if !divergence_db.is_finite() {
            return Err(bad_flag("--divergence-sqnr must be a finite number of dB"));
        }
        for (i, d) in decisions.iter().enumerate() {
            if decisions[..i].contains(d) {
                return Err(bad_flag(format!("--decision '{d}' is given twice")));
            }
        }
        Ok(StreamSpec {
            feedback: feeds.0,
            decisions,
            divergence_db,
            teacher_forcing,
        })
    }

    /// The fed-back outputs.
    pub fn state_outputs(&self) -> impl Iterator<Item = &str> {
        self.feedback.iter().map(|f| f.output.as_str())
    }

    /// The fed-back inputs.
    pub fn state_inputs(&self) -> Vec<String> {
        self.feedback.iter().map(|f| f.input.clone()).collect()
    }

    /// Checks the feeds and decisions against a model: each fed output and input exists and
    /// has the same element type; each decided output exists. `which` names the model.
    pub fn check(&self, sig: &Signature, which: &str) -> Result<()> {
        for f in &self.feedback {
            let out = sig.outputs.iter().find(|o| o.name == f.output).ok_or_else(|| {
                bad_input(format!(
                    "--stream: {which} has no output '{}' (outputs: {})",
                    f.output,
                    names(&sig.outputs)
                ))
            })?;
            let inp = sig.inputs.iter().find(|i| i.name == f.input).ok_or_else(|| {
                bad_input(format!(
                    "--stream: {which} has no input '{}' (inputs: {})",
                    f.input,
                    names(&sig.inputs)
                ))
            })?;
            if !out.can_feed(inp) {
                return Err(bad_input(format!(
                    "--stream {}->{}: {which} returns shape {} but takes {}",
                    f.output,
                    f.input,
                    out.shape_text(),
                    inp.shape_text()
                )));
            }
            if out.dtype != inp.dtype {
                return Err(bad_input(format!(
                    "--stream {}->{}: {which} returns {} but takes {}",
                    f.output,
                    f.input,
                    out.dtype.name(),
                    inp.dtype.name()
                )));
            }
        }
        for d in &self.decisions {
            let output = d.output();
            if !sig.outputs.iter().any(|o| o.name == output) {
                return Err(bad_input(format!(
                    "--decision '{d}': {which} has no output '{output}' (outputs: {})",
                    names(&sig.outputs)
                )));
            }
        }
        Ok(())
    }

    /// The decisions each step is judged by: the `--decision` rules, else the top-1 class of
    /// every output with a class axis that is not fed back. `first` is the golden run's first
    /// step (the outputs' shapes and types).
    pub fn decisions(&self, outputs: &[String], first: &[Tensor], classes: &ClassAxisPolicy) -> Vec<Decision> {
        if !self.decisions.is_empty() {
            return self.decisions.clone();
        }
        outputs
            .iter()
            .zip(first)
            .filter(|(name, _)| !self.state_outputs().any(|o| o == name.as_str()))
            .filter_map(|(name, t)| {
                let axis = classes.resolve(name, &t.shape, t.dtype())?;
                Some(Decision::Top1 {
                    output: name.clone(),
                    axis,
                })
            })
            .collect()
    }
}

fn names(infos: &[crate::data::model::TensorInfo]) -> String {
    infos.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tensor::TensorData;

    fn t(values: Vec<f32>) -> Tensor {
        Tensor::new(vec![1, values.len()], TensorData::Float32(values)).unwrap()
    }

    #[test]
    fn parses_feeds_and_decisions() {
        let feeds = |t: &str| Feeds::parse(t);
        let decision = |t: &str| Decision::parse_threshold(t).unwrap();
        let s = StreamSpec::new(
            feeds("stateN->state, hn -> h").unwrap(),
            vec![decision("output>0.5")],
            10.0,
            true,
        )
        .unwrap();
        assert_eq!(s.state_inputs(), vec!["state", "h"]);
        assert_eq!(s.state_outputs().collect::<Vec<_>>(), vec!["stateN", "hn"]);
        assert!(feeds("stateN").is_err());
        assert!(feeds("a->s,b->s").is_err());
        assert!(Decision::parse_threshold("p>=x").is_err());
        let twice = vec![decision("p>1"), decision("p>1")];
        assert!(StreamSpec::new(feeds("a->s").unwrap(), twice, 10.0, false).is_err());
        assert!(StreamSpec::new(feeds("a->s").unwrap(), vec![], f64::NAN, false).is_err());
    }

    #[test]
    fn threshold_decisions_compare_every_element() {
        let d = Decision::Threshold {
            output: "p".into(),
            above: true,
            threshold: 0.5,
        };
        assert!(d.agrees(&t(vec![0.51, 0.2]), &t(vec![0.9, 0.5])));
        assert!(!d.agrees(&t(vec![0.49, 0.2]), &t(vec![0.9, 0.5])));
        assert_eq!(d.to_string(), "p>0.5");
        let top = Decision::Top1 {
            output: "p".into(),
            axis: 1,
        };
        assert!(top.agrees(&t(vec![0.1, 0.7, 0.2]), &t(vec![0.3, 0.4, 0.3])));
        assert!(!top.agrees(&t(vec![0.5, 0.4, 0.1]), &t(vec![0.3, 0.4, 0.3])));
    }
}
