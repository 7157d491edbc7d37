//! What an eval measures (`--task`): how a sample's outputs become a prediction, how a label
//! becomes the truth it is judged against, and the per-sample record that keeps both. A new task
//! (detection) is one more [`TaskKind`] with its prediction, truth and record fields.

use serde::{Deserialize, Serialize};

use super::ctc::{best_classes, score, Reading, Vocabulary};
use crate::analyses::metrics::ClassAxisPolicy;
use crate::analyses::metrics::Decision;
use crate::data::dataset::Label;
use crate::data::model::Signature;
use crate::data::tensor::Tensor;

/// What was asked for, before it is checked against the model.
#[derive(Debug, Clone)]
pub enum TaskSpec {
    /// Top-1 and top-k accuracy on an output's class axis; labels are class indices, or class
    /// names with `classes` (one per line of `--classes`).
    Classify {
        output: Option<String>,
        top_k: usize,
        classes: Option<Vec<String>>,
    },
    /// A binary decision per sample (`OUT>T`): accuracy, precision, recall, F1.
    Decide { decision: Decision },
    /// Greedy CTC decoding with a vocabulary (one entry per line, class 0 the blank): character
    /// and word error rates, exact match.
    Ctc { output: Option<String>, vocabulary: String },
    /// No labels: the reference's own top-1 class is each sample's label.
    Agree { output: Option<String> },
}

impl TaskSpec {
    /// What the task is, as typed JSON (a records directory's and a shard's identity): the kind,
    /// the output, its settings; the class names and the vocabulary by their SHA-256.
    pub fn identity(&self) -> serde_json::Value {
        let digest = |text: &str| crate::foundation::hash::sha256_hex(text.as_bytes());
        match self {
            TaskSpec::Classify { output, top_k, classes } => serde_json::json!({
                "kind": "classify",
                "output": output,
                "top_k": top_k,
                "classes_sha256": classes.as_ref().map(|c| digest(&c.join("\n"))),
            }),
            TaskSpec::Decide { decision } => serde_json::json!({
                "kind": "decide",
                "decision": decision.identity(),
            }),
            TaskSpec::Ctc { output, vocabulary } => serde_json::json!({
                "kind": "ctc",
                "output": output,
                "vocabulary_sha256": digest(vocabulary),
            }),
            TaskSpec::Agree { output } => serde_json::json!({ "kind": "agree", "output": output }),
        }
    }
}

/// A task checked against the model: the output it reads and how (kept in an eval shard's file,
/// so that `merge` computes the figures as the eval would have).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub kind: TaskKind,
    /// The output the task reads.
    pub output: String,
}

/// How a checked task reads its output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    Classify { top_k: usize, classes: Option<Vec<String>> },
    Decide { above: bool, threshold: f64 },
    Ctc { vocabulary: Vocabulary },
    Agree,
}

/// What a run predicted for one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Prediction {
    /// The classes in order of score (the best first; as many as the task's top-k).
    Classes(Vec<usize>),
    /// A binary decision.
    Decision(bool),
    /// A decoded transcript.
    Text(String),
}

/// What a sample's label means to the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Truth {
    Class(usize),
    Decision(bool),
    Text(String),
}

impl Task {
    /// Checks `spec` against the model: the output exists (the only one with a class axis when
    /// none is named), its classes fit the vocabulary or the class names.
    pub fn check(
        spec: &TaskSpec,
        sig: &Signature,
        classes: &ClassAxisPolicy,
        output_shape: &[usize],
    ) -> Result<Task, String> {
        let pick = |named: &Option<String>| -> Result<String, String> {
            if let Some(n) = named {
                return sig
                    .outputs
                    .iter()
                    .find(|o| &o.name == n)
                    .map(|o| o.name.clone())
                    .ok_or_else(|| format!("the model has no output '{n}'"));
            }
            match sig.outputs.as_slice() {
                [one] => Ok(one.name.clone()),
                _ => Err(format!(
                    "the model has {} outputs: name the one the task reads with --output",
                    sig.outputs.len()
                )),
            }
        };
        let (kind, output) = match spec {
            TaskSpec::Classify { output, top_k, classes } => (
                TaskKind::Classify {
                    top_k: *top_k,
                    classes: classes.clone(),
                },
                pick(output)?,
            ),
            TaskSpec::Agree { output } => (TaskKind::Agree, pick(output)?),
            TaskSpec::Decide { decision } => match decision {
                Decision::Threshold {
                    output,
                    above,
                    threshold,
                } => (
                    TaskKind::Decide {
                        above: *above,
                        threshold: *threshold,
                    },
                    pick(&Some(output.clone()))?,
                ),
                Decision::Top1 { output, .. } => {
                    return Err(format!("--task decide needs OUTPUT>THRESHOLD, not {output}"))
                }
            },
            TaskSpec::Ctc { output, vocabulary } => {
                let out = pick(output)?;
                let steps_classes = output_shape.last().copied().unwrap_or(0);
                let vocabulary = Vocabulary::from_lines(vocabulary, steps_classes)?;
                (TaskKind::Ctc { vocabulary }, out)
            }
        };
        let mut task = Task { kind, output };
        task.check_shape(classes, output_shape)?;
        // Top-k of k classes or more is always right: not a figure worth reporting.
        if let TaskKind::Classify { top_k, .. } = &mut task.kind {
            let n = class_axis(classes, &task.output, output_shape).map_or(0, |axis| output_shape[axis]);
            if *top_k >= n {
                *top_k = 1;
            }
        }
        Ok(task)
    }

    /// The output's shape suits the task: one row of classes (classification), one value
    /// (decision), one sequence of class rows (CTC).
    fn check_shape(&self, classes: &ClassAxisPolicy, shape: &[usize]) -> Result<(), String> {
        let elements: usize = shape.iter().product();
        let rows_of = |axis: usize| elements / shape[axis].max(1);
        match &self.kind {
            TaskKind::Classify { classes: names, .. } => {
                let axis = class_axis(classes, &self.output, shape)?;
                if rows_of(axis) != 1 {
                    return Err(format!(
                        "output '{}' {shape:?} holds {} rows of classes; a classifier gives one per sample",
                        self.output,
                        rows_of(axis)
                    ));
                }
                if let Some(n) = names.as_ref().filter(|n| n.len() != shape[axis]) {
                    return Err(format!(
                        "--classes names {} classes; output '{}' has {}",
                        n.len(),
                        self.output,
                        shape[axis]
                    ));
                }
                Ok(())
            }
            TaskKind::Agree => class_axis(classes, &self.output, shape).map(|_| ()),
            TaskKind::Decide { .. } if elements != 1 => Err(format!(
                "output '{}' {shape:?} holds {elements} values; a decision reads one per sample",
                self.output
            )),
            TaskKind::Decide { .. } => Ok(()),
            TaskKind::Ctc { .. } if shape.len() < 2 => Err(format!(
                "output '{}' {shape:?} is not a sequence of class scores ([batch, steps, classes])",
                self.output
            )),
            TaskKind::Ctc { .. } => Ok(()),
        }
    }

    /// The truth of a label for this task (`None` for `agree`, whose truth is the reference's).
    pub fn truth(&self, label: &Label) -> Result<Truth, String> {
        match &self.kind {
            TaskKind::Classify { classes, .. } => class_of(label, classes.as_deref()).map(Truth::Class),
            TaskKind::Decide { .. } => decision_of(label).map(Truth::Decision),
            TaskKind::Ctc { .. } => Ok(Truth::Text(label.to_string())),
            TaskKind::Agree => Err("agree takes no labels".into()),
        }
    }

    /// The prediction a run makes from its outputs for one sample.
    pub fn predict(&self, classes: &ClassAxisPolicy, outputs: &[(String, Tensor)]) -> Result<Prediction, String> {
        let t = outputs
            .iter()
            .find(|(n, _)| *n == self.output)
            .map(|(_, t)| t)
            .ok_or_else(|| format!("no output '{}'", self.output))?;
        let values: Vec<f64> = (0..t.len()).map(|i| t.data.get_f64(i)).collect();
        match &self.kind {
            TaskKind::Classify { top_k, .. } => {
                class_axis(classes, &self.output, &t.shape)?;
                Ok(Prediction::Classes(ranked(&values, (*top_k).max(1))))
            }
            TaskKind::Agree => Ok(Prediction::Classes(ranked(&values, 1))),
            TaskKind::Decide { above, threshold } => {
                let v = values.first().copied().unwrap_or(f64::NAN);
                Ok(Prediction::Decision(if *above {
                    v > *threshold
                } else {
                    v < *threshold
                }))
            }
            TaskKind::Ctc { vocabulary } => {
                let classes = *t.shape.last().unwrap_or(&0);
                if classes != vocabulary.classes() {
                    return Err(format!(
                        "{classes} classes where the vocabulary has {}",
                        vocabulary.classes()
                    ));
                }
                let steps = values.len() / classes.max(1);
                Ok(Prediction::Text(
                    vocabulary.decode(&best_classes(&values, steps, classes)),
                ))
            }
        }
    }

    /// Whether the task's labels come from the reference's predictions.
    pub fn labels_from_reference(&self) -> bool {
        matches!(self.kind, TaskKind::Agree)
    }

    /// Whether `p` is a prediction this task makes on an output of `output_len` values (its kind,
    /// and classes within the output): what a resumed record must be to be counted.
    pub fn admits(&self, p: &Prediction, output_len: usize) -> bool {
        match (&self.kind, p) {
            (TaskKind::Classify { .. } | TaskKind::Agree, Prediction::Classes(c)) => {
                !c.is_empty() && c.iter().all(|&k| k < output_len)
            }
            (TaskKind::Decide { .. }, Prediction::Decision(_)) | (TaskKind::Ctc { .. }, Prediction::Text(_)) => true,
            _ => false,
        }
    }

    /// The truth the reference's prediction gives (`agree`).
    pub fn truth_of_prediction(p: &Prediction) -> Option<Truth> {
        match p {
            Prediction::Classes(c) => c.first().map(|&c| Truth::Class(c)),
            Prediction::Decision(d) => Some(Truth::Decision(*d)),
            Prediction::Text(t) => Some(Truth::Text(t.clone())),
        }
    }

    /// How a prediction scores against the truth.
    pub fn judge(&self, p: &Prediction, truth: &Truth) -> Judged {
        match (p, truth) {
            (Prediction::Classes(c), Truth::Class(t)) => Judged {
                correct: c.first() == Some(t),
                in_top_k: Some(c.contains(t)),
                reading: None,
            },
            (Prediction::Decision(d), Truth::Decision(t)) => Judged {
                correct: d == t,
                in_top_k: None,
                reading: None,
            },
            (Prediction::Text(text), Truth::Text(t)) => {
                let r = score(text, t);
                Judged {
                    correct: r.exact,
                    in_top_k: None,
                    reading: Some(r.into()),
                }
            }
            _ => Judged {
                correct: false,
                in_top_k: None,
                reading: None,
            },
        }
    }
}

/// How one prediction scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Judged {
    /// Top-1 right, the decision right, or the transcript exact.
    pub correct: bool,
    /// Classification: the true class among the top k.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_top_k: Option<bool>,
    /// CTC: the edits against the transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reading: Option<ReadingCounts>,
}

/// A transcript's edits against its label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReadingCounts {
    pub char_edits: usize,
    pub label_chars: usize,
    pub word_edits: usize,
    pub label_words: usize,
}

impl From<Reading> for ReadingCounts {
    fn from(r: Reading) -> ReadingCounts {
        ReadingCounts {
            char_edits: r.char_edits,
            label_chars: r.label_chars,
            word_edits: r.word_edits,
            label_words: r.label_words,
        }
    }
}

/// The class axis of an output as `compare` finds it.
fn class_axis(classes: &ClassAxisPolicy, output: &str, shape: &[usize]) -> Result<usize, String> {
    let asked = classes.per_output.get(output).copied().or(classes.default);
    classes
        .resolve(output, shape, crate::data::tensor::DType::Float32)
        .ok_or_else(|| match asked {
            Some(None) => format!("--class-axis says output '{output}' has no class axis; the task needs one"),
            Some(Some(axis)) => {
                format!("output '{output}' {shape:?} has no axis {axis} of two or more classes (--class-axis {axis})")
            }
            None => format!("output '{output}' {shape:?} has no class axis (name it with --class-axis)"),
        })
}

/// The `k` best indices of `values`, best first, as NumPy ranks them: a NaN above every number
/// (`argmax` returns the first NaN), equal values (`-0.0 == 0.0`) in index order.
fn ranked(values: &[f64], k: usize) -> Vec<usize> {
    let key = |v: f64| (v.is_nan(), if v.is_nan() { 0.0 } else { v });
    let mut order: Vec<usize> = (0..values.len()).collect();
    // A stable sort: equal keys keep their index order.
    order.sort_by(|&a, &b| {
        let (na, va) = key(values[a]);
        let (nb, vb) = key(values[b]);
        nb.cmp(&na)
            .then(vb.partial_cmp(&va).unwrap_or(std::cmp::Ordering::Equal))
    });
    order.truncate(k);
    order
}

/// A class label: an index, or a name when the classes are named (a name first: the classes
/// of a text-direction classifier are named `0` and `180`).
fn class_of(label: &Label, names: Option<&[String]>) -> Result<usize, String> {
    let index = |i: i64| usize::try_from(i).map_err(|_| format!("class {i} is negative"));
    if let (Label::Text(t), Some(names)) = (label, names) {
        if let Some(k) = names.iter().position(|c| c == t) {
            return Ok(k);
        }
    }
    match (label, names) {
        (Label::Int(i), _) => index(*i),
        (Label::Text(t), names) => match t.trim().parse::<i64>() {
            Ok(i) => index(i),
            Err(_) => names
                .and_then(|n| n.iter().position(|c| c == t))
                .ok_or_else(|| match names {
                    Some(_) => format!("'{t}' is not one of the --classes names"),
                    None => format!("'{t}' is not a class index (name the classes with --classes)"),
                }),
        },
        (Label::Bool(b), _) => Err(format!("{b} is not a class")),
    }
}

/// A decision label: true or false, 1 or 0, yes or no.
fn decision_of(label: &Label) -> Result<bool, String> {
    match label {
        Label::Bool(b) => Ok(*b),
        Label::Int(0) => Ok(false),
        Label::Int(1) => Ok(true),
        Label::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" => Ok(true),
            "0" | "false" | "no" => Ok(false),
            _ => Err(format!("'{t}' is not a decision (1/0, true/false, yes/no)")),
        },
        Label::Int(i) => Err(format!("{i} is not a decision (1 or 0)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_mean_what_the_task_reads() {
        assert_eq!(class_of(&Label::Text(" 7".into()), None), Ok(7));
        let names = ["cat".to_string(), "dog".to_string()];
        assert_eq!(class_of(&Label::Text("dog".into()), Some(&names)), Ok(1));
        assert!(class_of(&Label::Text("cow".into()), Some(&names)).is_err());
        let angles = ["0".to_string(), "180".to_string()];
        assert_eq!(class_of(&Label::Text("180".into()), Some(&angles)), Ok(1));
        assert_eq!(class_of(&Label::Int(1), Some(&angles)), Ok(1));
        assert!(class_of(&Label::Int(-1), None).is_err());
        assert_eq!(decision_of(&Label::Text("Yes".into())), Ok(true));
        assert!(decision_of(&Label::Int(2)).is_err());
    }

    #[test]
    fn ranking_takes_the_first_of_equal_scores() {
        assert_eq!(ranked(&[0.1, 0.9, 0.9, 0.5], 3), vec![1, 2, 3]);
        // np.argmax([-0.0, 0.0, -1.0]) == 0: the zeros are equal.
        assert_eq!(ranked(&[-0.0, 0.0, -1.0], 1), vec![0]);
        // np.argmax([1.0, nan, 0.0]) == 1 whatever the NaN's sign bit (x86 makes 0/0 negative).
        let negative_nan = f64::from_bits(0xfff8_0000_0000_0000);
        assert_eq!(ranked(&[1.0, negative_nan, 0.0], 1), vec![1]);
        assert_eq!(ranked(&[f64::NEG_INFINITY, negative_nan, f64::NAN], 3), vec![1, 2, 0]);
    }
}
