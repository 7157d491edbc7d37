//! What one sample's decodes say: the reference's free-running decode, a target's (its own tokens
//! fed back, then from its first divergence on the reference's tokens forced, for per-step
//! figures), and the figures that compare them. Every number here comes from the logits and
//! tokens alone, so a test can compute each one by hand.

use super::decode::{greedy, Loop, PartFailure, PartOutputs, PartRunner, State};
use super::sessions::{KeptCall, SampleWork};
use super::spec::{GenerationSpec, PartKind};
use crate::analyses::accuracy::ctc::edit_distance;
use crate::analyses::metrics::logits;
use crate::data::tensor::Tensor;
use crate::report::common::Num;
use crate::report::generation::{Divergence, EditCounts, StepFigures, StopReason};

/// The reference's decode of one sample, with every step's logits (what targets are held to).
#[derive(Debug, Clone)]
pub struct ReferenceDecode {
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    pub logits: Vec<Vec<f32>>,
}

/// A target's decode of one sample.
#[derive(Debug, Clone)]
pub struct TargetDecode {
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    /// The first step whose token is not the reference's.
    pub divergence: Option<usize>,
    /// At the divergence, the reference's logit for its token minus its logit for the target's
    /// (computed while the reference's logits are at hand).
    pub margin: Option<f64>,
    /// One per reference step reached (teacher-forced after the divergence).
    pub steps: Vec<StepFigures>,
    pub error: Option<PartFailure>,
}

/// The tokens a step may not choose: `suppress_tokens`, and on the first new token
/// `suppress_at_start` too.
fn suppressed(spec: &GenerationSpec, step: usize) -> Vec<u32> {
    let mut s = spec.suppress_tokens.clone();
    if step == 0 {
        s.extend(&spec.suppress_at_start);
    }
    s
}

/// What a decode shows each step before its token is fed: the step, its logits, the greedy
/// choice and the state that produced them.
type Watch<'w> = dyn FnMut(usize, &[f32], Option<u32>, &State) + 'w;

/// Free-running greedy decode: each chosen token fed back until the end token or the limit.
/// `watch` sees every step's logits and choice before the token is fed (and may keep the state).
fn free_run(
    spec: &GenerationSpec,
    runner: &mut dyn PartRunner,
    sample: &Tensor,
    watch: &mut Watch<'_>,
) -> (Vec<u32>, StopReason, Option<PartFailure>) {
    let lp = Loop::new(spec);
    let (mut state, mut logits) = match lp.begin(runner, sample) {
        Ok(b) => b,
        Err(e) => return (Vec::new(), StopReason::Failed, Some(e)),
    };
    let mut tokens = Vec::new();
    loop {
        let step = tokens.len();
        runner.token();
        let choice = greedy(&logits, &suppressed(spec, step));
        watch(step, &logits, choice, &state);
        let Some(token) = choice else {
            return (tokens, StopReason::NoNumber, None);
        };
        tokens.push(token);
        if token == spec.end_token.1 {
            return (tokens, StopReason::EndToken, None);
        }
        if tokens.len() == spec.max_new_tokens {
            return (tokens, StopReason::Limit, None);
        }
        logits = match lp.feed(runner, &mut state, token) {
            Ok(l) => l,
            Err(e) => return (tokens, StopReason::Failed, Some(e)),
        };
    }
}

/// `--task generate|transcribe`: the reference decodes each sample, and each target decodes it
/// with its own tokens, teacher-forced from its first divergence.
pub struct Decode<'s> {
    pub audited: &'s GenerationSpec,
    pub reference: &'s GenerationSpec,
}

impl SampleWork for Decode<'_> {
    type Reference = ReferenceDecode;
    type Target = TargetDecode;
    const LABEL: &'static str = "generate";

    fn reference(&self, runner: &mut dyn PartRunner, sample: &Tensor) -> Result<ReferenceDecode, PartFailure> {
        decode_reference(self.reference, runner, sample)
    }

    fn kept(&self, r: &ReferenceDecode) -> ReferenceDecode {
        ReferenceDecode {
            tokens: r.tokens.clone(),
            stop: r.stop,
            logits: Vec::new(),
        }
    }

    fn target(
        &self,
        runner: &mut dyn PartRunner,
        sample: &Tensor,
        reference: &ReferenceDecode,
        keep_call: bool,
    ) -> (TargetDecode, Option<KeptCall>) {
        decode_target(self.audited, runner, sample, (reference, keep_call))
    }
}

/// The reference's decode of one sample; a part that fails ends it.
pub fn decode_reference(
    spec: &GenerationSpec,
    runner: &mut dyn PartRunner,
    sample: &Tensor,
) -> Result<ReferenceDecode, PartFailure> {
    let mut logits = Vec::new();
    let (tokens, stop, error) = free_run(spec, runner, sample, &mut |_, l, _, _| logits.push(l.to_vec()));
    match error {
        Some(e) => Err(e),
        None => Ok(ReferenceDecode { tokens, stop, logits }),
    }
}

/// A target's decode of one sample: free-running, each step compared with the reference's while
/// the two agree; then, from the first divergence, the state kept there fed the reference's
/// tokens, so every reference step has its figures (teacher forcing costs only the steps after
/// the divergence). With `keep_call`, the part call that produced the divergent step's logits and
/// the inputs the target fed it (`--explain`).
pub fn decode_target(
    spec: &GenerationSpec,
    runner: &mut dyn PartRunner,
    sample: &Tensor,
    (reference, keep_call): (&ReferenceDecode, bool),
) -> (TargetDecode, Option<KeptCall>) {
    let mut steps = Vec::new();
    let mut divergence: Option<(usize, State)> = None;
    let diverged = std::cell::Cell::new(false);
    let mut recording = Recording {
        inner: runner,
        keep: keep_call,
        frozen: &diverged,
        last: None,
    };
    let (tokens, stop, error) = free_run(spec, &mut recording, sample, &mut |step, logits, choice, state| {
        if divergence.is_some() {
            return;
        }
        if let (Some(r), Some(&want)) = (reference.logits.get(step), reference.tokens.get(step)) {
            steps.push(step_figures(r, logits, choice == Some(want)));
        }
        if choice != reference.tokens.get(step).copied() {
            divergence = Some((step, state.clone()));
            diverged.set(true);
        }
    });
    let divergent_call = recording.last.take().filter(|_| divergence.is_some());
    let margin = divergence.as_ref().and_then(|(step, _)| {
        let l = reference.logits.get(*step)?;
        let ours = l.get(*reference.tokens.get(*step)? as usize)?;
        let theirs = l.get(*tokens.get(*step)? as usize)?;
        Some(f64::from(*ours) - f64::from(*theirs))
    });
    let runner = recording.inner;
    let mut decode = TargetDecode {
        margin,
        tokens,
        stop,
        divergence: divergence.as_ref().map(|(s, _)| *s),
        steps,
        error,
    };
    if let (Some((at, state)), None) = (divergence, &decode.error) {
        if let Err(e) = force_from(spec, runner, reference, (at, state), &mut decode.steps) {
            decode.error = Some(e);
        }
    }
    (decode, divergent_call)
}

/// A runner that keeps the inputs of the latest call until `frozen` is set: the call that
/// produced the divergent step's logits.
struct Recording<'r> {
    inner: &'r mut dyn PartRunner,
    keep: bool,
    frozen: &'r std::cell::Cell<bool>,
    last: Option<(PartKind, Vec<(String, Tensor)>)>,
}

impl PartRunner for Recording<'_> {
    fn run(&mut self, part: PartKind, inputs: Vec<(String, Tensor)>) -> Result<PartOutputs, PartFailure> {
        if self.keep && !self.frozen.get() {
            self.last = Some((part, inputs.clone()));
        }
        self.inner.run(part, inputs)
    }

    fn token(&mut self) {
        self.inner.token();
    }
}

/// Teacher forcing from step `at`: the reference's token of each step fed to the state the
/// target had there, each next step's logits compared with the reference's.
fn force_from(
    spec: &GenerationSpec,
    runner: &mut dyn PartRunner,
    reference: &ReferenceDecode,
    (at, mut state): (usize, State),
    steps: &mut Vec<StepFigures>,
) -> Result<(), PartFailure> {
    let lp = Loop::new(spec);
    for step in at..reference.tokens.len().saturating_sub(1) {
        let logits = lp.feed(runner, &mut state, reference.tokens[step])?;
        runner.token();
        let want = reference.tokens[step + 1];
        let choice = greedy(&logits, &suppressed(spec, step + 1));
        steps.push(step_figures(&reference.logits[step + 1], &logits, choice == Some(want)));
    }
    Ok(())
}

/// One step's logits against the reference's: top-1, KL(reference ‖ target) of their softmax in
/// nats, SQNR in dB.
pub fn step_figures(reference: &[f32], target: &[f32], top1: bool) -> StepFigures {
    StepFigures {
        top1,
        kl: Num(logits::kl_divergence(reference, target)),
        sqnr_db: Num(logits::sqnr_db(reference, target)),
    }
}

/// Positions after `from` whose tokens differ (a token one side lacks counts as differing).
pub fn later_differing(reference: &[u32], target: &[u32], from: usize) -> usize {
    let len = reference.len().max(target.len());
    (from + 1..len).filter(|&i| reference.get(i) != target.get(i)).count()
}

/// The divergence as the report states it: both tokens spelled, the text they share before it,
/// and the reference's margin between its choice and the target's.
pub fn divergence(spec: &GenerationSpec, reference: &ReferenceDecode, target: &TargetDecode) -> Option<Divergence> {
    let step = target.divergence?;
    let reference_token = *reference.tokens.get(step)?;
    // A step whose logits held no number chose nothing: the divergence is there all the same.
    let target_token = target.tokens.get(step).copied();
    let margin = target.margin.unwrap_or(f64::NAN);
    Some(Divergence {
        step,
        reference_token,
        reference_piece: spec.token_text(reference_token),
        target_token,
        target_piece: target_token.map_or_else(|| "(no logit is a number)".into(), |t| spec.token_text(t)),
        common_text: spec.text(&reference.tokens[..step]),
        reference_margin: Num(margin),
    })
}

/// A text as word error rates compare it: lower-cased, punctuation dropped (every character that
/// is neither a letter, a digit nor whitespace deleted: "round-fark" is one word, "it's" is
/// "its"), whitespace collapsed; jiwer's default transformation.
pub fn normalise(text: &str) -> String {
    let kept: String = text
        .chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect();
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Word and character edits of `text` against `label`, both normalised.
pub fn edits(text: &str, label: &str) -> (EditCounts, EditCounts) {
    let (t, l) = (normalise(text), normalise(label));
    let (tw, lw): (Vec<&str>, Vec<&str>) = (t.split_whitespace().collect(), l.split_whitespace().collect());
    let (tc, lc): (Vec<char>, Vec<char>) = (t.chars().collect(), l.chars().collect());
    (
        EditCounts {
            edits: edit_distance(&tw, &lw),
            of: lw.len(),
        },
        EditCounts {
            edits: edit_distance(&tc, &lc),
            of: lc.len(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_drops_punctuation_and_case() {
        assert_eq!(normalise("Hello, World!  It's 7."), "hello world its 7");
        assert_eq!(normalise("'quoted' — dash"), "quoted dash");
        assert_eq!(normalise(" The quick round-fark jump."), "the quick roundfark jump");
    }

    #[test]
    fn word_and_character_edits_are_levenshteins_of_the_normalised_texts() {
        let (w, c) = edits("The cat sat.", "the cat sat on the mat");
        assert_eq!((w.edits, w.of), (3, 6));
        // "the cat sat" vs "the cat sat on the mat": 11 more characters.
        assert_eq!((c.edits, c.of), (11, 22));
    }

    #[test]
    fn later_positions_differing_count_missing_tokens() {
        assert_eq!(later_differing(&[1, 2, 3, 4], &[1, 9, 3, 5, 6], 1), 2);
        assert_eq!(later_differing(&[1, 2], &[1, 3], 1), 0);
    }
}
