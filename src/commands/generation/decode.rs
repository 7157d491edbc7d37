//! The decoding loop of one spec on one target: the encoder and prompt, then one step per token,
//! the key/value state carried by the loop (grown, or written into its fixed buffers), each
//! step's token chosen greedily or forced. The parts run wherever a [`PartRunner`] runs them (a
//! target's serving sessions, or a test's stand-in), so the loop is the same for every target.

use super::spec::{Form, GenerationSpec, Layout, PartKind};
use crate::data::tensor::{Tensor, TensorData};
use crate::report::RunStatus;

/// A part that did not answer: which, how it ended, the runtime's words. `part` is `None` when
/// the loop itself stopped before any part ran (an empty prompt).
#[derive(Debug, Clone, PartialEq)]
pub struct PartFailure {
    pub part: Option<PartKind>,
    /// The file of a part of several that failed.
    pub file: Option<String>,
    pub status: RunStatus,
    pub error: String,
}

impl PartFailure {
    /// Where it failed and why, in one line: `part step: ...`.
    pub fn words(&self) -> String {
        match (self.part, &self.file) {
            (Some(p), Some(f)) => format!("part {p} ({f}): {}", self.error),
            (Some(p), None) => format!("part {p}: {}", self.error),
            (None, _) => self.error.clone(),
        }
    }
}

/// A part's answer: its outputs by name.
pub type PartOutputs = Vec<(String, Tensor)>;

/// Runs one part of the model on its inputs and returns its outputs by name.
pub trait PartRunner {
    fn run(&mut self, part: PartKind, inputs: Vec<(String, Tensor)>) -> Result<PartOutputs, PartFailure>;

    /// Told once per new token whose logits the loop has (for a progress line).
    fn token(&mut self) {}
}

/// The decoder's state between steps: the self-attention keys and values per layer (`key`,
/// `value` of layer 0, then layer 1...), the cross-attention ones of an encoder-decoder, and how
/// many positions are filled.
#[derive(Debug, Clone)]
pub struct State {
    self_kv: Vec<Tensor>,
    cross_kv: Vec<Tensor>,
    filled: usize,
}

/// The loop over one spec's parts.
pub struct Loop<'s> {
    spec: &'s GenerationSpec,
}

impl<'s> Loop<'s> {
    pub fn new(spec: &'s GenerationSpec) -> Loop<'s> {
        Loop { spec }
    }

    /// Runs the encoder (an encoder-decoder's) and the start tokens with the sample's prompt:
    /// the state after them and the logits that choose the first new token.
    pub fn begin(&self, runner: &mut dyn PartRunner, sample: &Tensor) -> Result<(State, Vec<f32>), PartFailure> {
        match self.spec.layout {
            Layout::EncoderDecoder => self.begin_encoder_decoder(runner, sample),
            Layout::DecoderOnly => self.begin_decoder_only(runner, sample),
        }
    }

    fn begin_encoder_decoder(
        &self,
        runner: &mut dyn PartRunner,
        sample: &Tensor,
    ) -> Result<(State, Vec<f32>), PartFailure> {
        let enc = runner.run(PartKind::Encoder, vec![("input_features".into(), sample.clone())])?;
        let hidden = take(&enc, PartKind::Encoder, "last_hidden_state")?;
        let ids: Vec<i64> = self.spec.start_tokens.iter().map(|(_, i)| i64::from(*i)).collect();
        let first = self.spec.first_decoder_kind();
        let out = runner.run(
            first,
            vec![
                ("input_ids".into(), ids_tensor(&ids)),
                ("encoder_hidden_states".into(), hidden.clone()),
            ],
        )?;
        let logits = last_logits(&out, first, self.spec.vocab)?;
        let present = self.kv_outputs(&out, first, "present", ".decoder")?;
        let cross_kv = self.kv_outputs(&out, first, "present", ".encoder")?;
        let self_kv = match self.spec.form {
            Form::Dynamic => present,
            Form::Static => self.prompt_buffers(&present, ids.len(), first)?,
        };
        let state = State {
            self_kv,
            cross_kv,
            filled: ids.len(),
        };
        Ok((state, logits))
    }

    fn begin_decoder_only(
        &self,
        runner: &mut dyn PartRunner,
        sample: &Tensor,
    ) -> Result<(State, Vec<f32>), PartFailure> {
        let (state, mut logits) = self.prompt(runner, sample)?;
        Ok((state, logits.pop().unwrap_or_default()))
    }

    /// Feeds a decoder-only sample's prompt (the start tokens, then its ids) as the spec runs it:
    /// in chunks through `prefill`, in one call of a dynamic decoder, or a token at a time
    /// through the step. The state after it, and the logits after every position of the prompt
    /// (the last ones choose the first new token; `--task score` reads them all).
    pub fn prompt(&self, runner: &mut dyn PartRunner, sample: &Tensor) -> Result<(State, Vec<Vec<f32>>), PartFailure> {
        let mut ids: Vec<i64> = self.spec.start_tokens.iter().map(|(_, i)| i64::from(*i)).collect();
        ids.extend(prompt_ids(sample));
        if ids.is_empty() {
            return Err(PartFailure {
                part: None,
                file: None,
                status: RunStatus::Failed,
                error: "the prompt is empty and the spec has no start tokens".into(),
            });
        }
        match (self.spec.form, self.spec.prefill_length) {
            (Form::Dynamic, _) => {
                let kv = self.spec.kv;
                let empty = Tensor::new(vec![1, kv.heads, 0, kv.head_dim], TensorData::Float32(Vec::new()))
                    .map_err(|e| failure(PartKind::Decoder, e.to_string()))?;
                let state = State {
                    self_kv: vec![empty; 2 * kv.layers],
                    cross_kv: Vec::new(),
                    filled: 0,
                };
                self.run_dynamic_decoder(runner, state, &ids)
            }
            (Form::Static, Some(n)) => self.prefill(runner, &ids, n),
            (Form::Static, None) => {
                let mut state = State {
                    self_kv: self.empty_buffers(),
                    cross_kv: Vec::new(),
                    filled: 0,
                };
                let mut logits = Vec::with_capacity(ids.len());
                for id in ids {
                    logits.push(self.feed_static(runner, &mut state, id)?);
                }
                Ok((state, logits))
            }
        }
    }

    /// The prompt through the `prefill` part in chunks of `n`, the last padded with the end
    /// token and masked (docs/generation.md): each chunk's real tokens' keys and values written
    /// into the buffers' next slots, the logits of every real position kept.
    fn prefill(
        &self,
        runner: &mut dyn PartRunner,
        ids: &[i64],
        n: usize,
    ) -> Result<(State, Vec<Vec<f32>>), PartFailure> {
        let part = PartKind::Prefill;
        let k = self.spec.kv_length.unwrap_or(0);
        let mut state = State {
            self_kv: self.empty_buffers(),
            cross_kv: Vec::new(),
            filled: 0,
        };
        let mut logits = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(n) {
            let (filled, real) = (state.filled, chunk.len());
            if filled + real > k {
                return Err(failure(
                    part,
                    format!("the KV buffers' {k} slots cannot hold a prompt of {} tokens", ids.len()),
                ));
            }
            let mut chunk_ids = chunk.to_vec();
            chunk_ids.resize(n, i64::from(self.spec.end_token.1));
            let positions: Vec<i64> = (filled..filled + n).map(|p| p as i64).collect();
            let mut mask = vec![0i64; k + n];
            mask[..filled].fill(1);
            mask[k..k + real].fill(1);
            let mut inputs = vec![
                ("input_ids".to_string(), ids_tensor(&chunk_ids)),
                ("position_ids".to_string(), ids_tensor(&positions)),
                ("attention_mask".to_string(), ids_tensor(&mask)),
            ];
            inputs.extend(self.kv_inputs(&state.self_kv, ""));
            let out = runner.run(part, inputs)?;
            for (buffer, present) in state
                .self_kv
                .iter_mut()
                .zip(self.kv_outputs(&out, part, "present", "")?)
            {
                write_slots(buffer, &first_positions(&present, real, part)?, filled, part)?;
            }
            state.filled += real;
            logits.extend(position_logits(&out, part, self.spec.vocab)?.into_iter().take(real));
        }
        Ok((state, logits))
    }

    /// Feeds one token: the logits that choose the next.
    pub fn feed(&self, runner: &mut dyn PartRunner, state: &mut State, token: u32) -> Result<Vec<f32>, PartFailure> {
        let id = i64::from(token);
        match (self.spec.layout, self.spec.form) {
            (_, Form::Static) => self.feed_static(runner, state, id),
            (Layout::DecoderOnly, Form::Dynamic) => {
                let (next, mut logits) = self.run_dynamic_decoder(runner, state.clone(), &[id])?;
                *state = next;
                Ok(logits.pop().unwrap_or_default())
            }
            (Layout::EncoderDecoder, Form::Dynamic) => {
                let part = PartKind::DecoderWithPast;
                let mut inputs = vec![("input_ids".to_string(), ids_tensor(&[id]))];
                inputs.extend(self.kv_inputs(&state.self_kv, ".decoder"));
                inputs.extend(self.kv_inputs(&state.cross_kv, ".encoder"));
                let out = runner.run(part, inputs)?;
                state.self_kv = self.kv_outputs(&out, part, "present", ".decoder")?;
                state.filled += 1;
                last_logits(&out, part, self.spec.vocab)
            }
        }
    }

    /// One call of a dynamic decoder-only model on `ids` after the state's past: the state after
    /// them, and the logits after each.
    fn run_dynamic_decoder(
        &self,
        runner: &mut dyn PartRunner,
        state: State,
        ids: &[i64],
    ) -> Result<(State, Vec<Vec<f32>>), PartFailure> {
        let part = PartKind::Decoder;
        let past = state.filled;
        let total = past + ids.len();
        let mut inputs = vec![
            ("input_ids".to_string(), ids_tensor(ids)),
            ("attention_mask".to_string(), ids_tensor(&vec![1; total])),
        ];
        if self.has_input(part, "position_ids") {
            let positions: Vec<i64> = (past..total).map(|p| p as i64).collect();
            inputs.push(("position_ids".into(), ids_tensor(&positions)));
        }
        inputs.extend(self.kv_inputs(&state.self_kv, ""));
        let out = runner.run(part, inputs)?;
        let logits = position_logits(&out, part, self.spec.vocab)?;
        if logits.len() != ids.len() {
            return Err(failure(
                part,
                format!(
                    "its logits cover {} positions, not the {} tokens fed",
                    logits.len(),
                    ids.len()
                ),
            ));
        }
        let next = State {
            self_kv: self.kv_outputs(&out, part, "present", "")?,
            cross_kv: Vec::new(),
            filled: total,
        };
        Ok((next, logits))
    }

    /// One step of a static part: the token at position `filled`, the buffers' filled slots
    /// unmasked, the token's key and value written into its slot.
    fn feed_static(&self, runner: &mut dyn PartRunner, state: &mut State, id: i64) -> Result<Vec<f32>, PartFailure> {
        let part = PartKind::Step;
        let k = self.spec.kv_length.unwrap_or(0);
        let n = state.filled;
        if n >= k {
            return Err(failure(
                part,
                format!(
                    "the KV buffers' {k} slots are full: kv_length is too short for this prompt and max_new_tokens"
                ),
            ));
        }
        let mut mask = vec![0i64; k + 1];
        mask[..n].fill(1);
        mask[k] = 1;
        let kind = self.self_kind();
        let mut inputs = vec![
            ("input_ids".to_string(), ids_tensor(&[id])),
            ("position_ids".to_string(), ids_tensor(&[n as i64])),
            ("attention_mask".to_string(), ids_tensor(&mask)),
        ];
        inputs.extend(self.kv_inputs(&state.self_kv, kind));
        if self.spec.layout == Layout::EncoderDecoder {
            inputs.extend(self.kv_inputs(&state.cross_kv, ".encoder"));
        }
        let out = runner.run(part, inputs)?;
        let present = self.kv_outputs(&out, part, "present", kind)?;
        for (buffer, new) in state.self_kv.iter_mut().zip(&present) {
            write_slots(buffer, new, n, part)?;
        }
        state.filled += 1;
        last_logits(&out, part, self.spec.vocab)
    }

    /// The self-attention state's name infix: `.decoder` in an encoder-decoder, none otherwise.
    fn self_kind(&self) -> &'static str {
        match self.spec.layout {
            Layout::EncoderDecoder => ".decoder",
            Layout::DecoderOnly => "",
        }
    }

    fn has_input(&self, part: PartKind, name: &str) -> bool {
        self.spec.part(part).signature.inputs.iter().any(|i| i.name == name)
    }

    /// Zeroed static buffers, `[1, heads, kv_length, width]` per key and value of every layer.
    fn empty_buffers(&self) -> Vec<Tensor> {
        let kv = self.spec.kv;
        let k = self.spec.kv_length.unwrap_or(0);
        let len = kv.heads * k * kv.head_dim;
        (0..2 * kv.layers)
            .map(|_| Tensor {
                shape: vec![1, kv.heads, k, kv.head_dim],
                data: TensorData::Float32(vec![0.0; len]),
            })
            .collect()
    }

    /// A prompt's keys and values (`[1, heads, positions, width]`) written into fresh buffers.
    fn prompt_buffers(&self, present: &[Tensor], positions: usize, part: PartKind) -> Result<Vec<Tensor>, PartFailure> {
        let mut buffers = self.empty_buffers();
        for (buffer, p) in buffers.iter_mut().zip(present) {
            if p.shape.get(2) != Some(&positions) {
                return Err(failure(
                    part,
                    format!(
                        "its present state is {:?}, not {positions} positions of the start tokens",
                        p.shape
                    ),
                ));
            }
            write_slots(buffer, p, 0, part)?;
        }
        Ok(buffers)
    }

    fn kv_inputs(&self, tensors: &[Tensor], kind: &str) -> Vec<(String, Tensor)> {
        kv_names("past_key_values", kind, self.spec.kv.layers)
            .into_iter()
            .zip(tensors.iter().cloned())
            .collect()
    }

    fn kv_outputs(
        &self,
        out: &PartOutputs,
        part: PartKind,
        prefix: &str,
        kind: &str,
    ) -> Result<Vec<Tensor>, PartFailure> {
        kv_names(prefix, kind, self.spec.kv.layers)
            .iter()
            .map(|name| take(out, part, name).map(|t| as_f32(t.clone())))
            .collect()
    }
}

/// `PREFIX.N KIND.key`, `... .value` for every layer, in the state's order.
fn kv_names(prefix: &str, kind: &str, layers: usize) -> Vec<String> {
    (0..layers)
        .flat_map(|n| ["key", "value"].map(|kv| format!("{prefix}.{n}{kind}.{kv}")))
        .collect()
}

/// Writes `new` (`[1, heads, m, width]`) into `buffer` (`[1, heads, k, width]`) at slots
/// `at..at + m`.
fn write_slots(buffer: &mut Tensor, new: &Tensor, at: usize, part: PartKind) -> Result<(), PartFailure> {
    let (b, n) = (buffer.shape.clone(), new.shape.clone());
    let fits = b.len() == 4 && n.len() == 4 && b[1] == n[1] && b[3] == n[3] && at + n[2] <= b[2];
    if !fits {
        return Err(failure(
            part,
            format!("its present state {n:?} does not fit the KV buffer {b:?} at slot {at}"),
        ));
    }
    let (heads, k, m, width) = (b[1], b[2], n[2], b[3]);
    let src = f32_values(new);
    let TensorData::Float32(dst) = &mut buffer.data else {
        return Err(failure(part, "a KV buffer is not float32".into()));
    };
    for h in 0..heads {
        for p in 0..m {
            let from = (h * m + p) * width;
            let to = (h * k + at + p) * width;
            dst[to..to + width].copy_from_slice(&src[from..from + width]);
        }
    }
    Ok(())
}

fn take<'a>(out: &'a PartOutputs, part: PartKind, name: &str) -> Result<&'a Tensor, PartFailure> {
    out.iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t)
        .ok_or_else(|| failure(part, format!("its answer has no output {name}")))
}

/// The logits of every position (`[.., positions, vocab]`), as float32 rows.
fn position_logits(out: &PartOutputs, part: PartKind, vocab: usize) -> Result<Vec<Vec<f32>>, PartFailure> {
    let t = take(out, part, "logits")?;
    if t.shape.last() != Some(&vocab) || t.len() < vocab {
        return Err(failure(
            part,
            format!("its logits are {:?}, not a last axis of {vocab}", t.shape),
        ));
    }
    Ok(f32_values(t).chunks(vocab).map(<[f32]>::to_vec).collect())
}

/// The first `m` positions of a `[1, heads, positions, width]` tensor (a prefill chunk's real
/// tokens' keys or values).
fn first_positions(t: &Tensor, m: usize, part: PartKind) -> Result<Tensor, PartFailure> {
    let s = &t.shape;
    if s.len() != 4 || s[2] < m {
        return Err(failure(
            part,
            format!("its present state {s:?} does not hold the chunk's {m} tokens"),
        ));
    }
    let (heads, positions, width) = (s[1], s[2], s[3]);
    let values = f32_values(t);
    let mut kept = Vec::with_capacity(heads * m * width);
    for h in 0..heads {
        let from = h * positions * width;
        kept.extend_from_slice(&values[from..from + m * width]);
    }
    Ok(Tensor {
        shape: vec![1, heads, m, width],
        data: TensorData::Float32(kept),
    })
}

/// The logits of the last position (`[.., positions, vocab]`), as float32.
fn last_logits(out: &PartOutputs, part: PartKind, vocab: usize) -> Result<Vec<f32>, PartFailure> {
    let t = take(out, part, "logits")?;
    if t.shape.last() != Some(&vocab) || t.len() < vocab {
        return Err(failure(
            part,
            format!("its logits are {:?}, not a last axis of {vocab}", t.shape),
        ));
    }
    let values = f32_values(t);
    Ok(values[values.len() - vocab..].to_vec())
}

fn f32_values(t: &Tensor) -> Vec<f32> {
    match &t.data {
        TensorData::Float32(v) => v.clone(),
        other => (0..other.len()).map(|i| other.get_f64(i) as f32).collect(),
    }
}

fn as_f32(t: Tensor) -> Tensor {
    match t.data {
        TensorData::Float32(_) => t,
        _ => Tensor {
            data: TensorData::Float32(f32_values(&t)),
            shape: t.shape,
        },
    }
}

fn ids_tensor(ids: &[i64]) -> Tensor {
    Tensor {
        shape: vec![1, ids.len()],
        data: TensorData::Int64(ids.to_vec()),
    }
}

/// A decoder-only sample's prompt ids (any integer type, any shape: read in order).
pub fn prompt_ids(sample: &Tensor) -> Vec<i64> {
    (0..sample.data.len())
        .filter_map(|i| sample.data.get_i128(i).and_then(|v| i64::try_from(v).ok()))
        .collect()
}

fn failure(part: PartKind, error: String) -> PartFailure {
    PartFailure {
        part: Some(part),
        file: None,
        status: RunStatus::Failed,
        error,
    }
}

/// The greedy choice: the highest logit (the first of equal ones), never a suppressed token; a
/// NaN is never chosen. `None` when no logit is a number.
pub fn greedy(logits: &[f32], suppressed: &[u32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() || suppressed.contains(&(i as u32)) {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_of_equal_maxima_and_skips_suppressed_and_nan() {
        assert_eq!(greedy(&[1.0, 3.0, 3.0, 2.0], &[]), Some(1));
        assert_eq!(greedy(&[1.0, 3.0, 3.0, 2.0], &[1]), Some(2));
        assert_eq!(greedy(&[f32::NAN, 0.5, f32::NAN], &[]), Some(1));
        assert_eq!(greedy(&[f32::NAN], &[]), None);
        assert_eq!(greedy(&[f32::NEG_INFINITY, f32::NEG_INFINITY], &[]), Some(0));
    }

    #[test]
    fn slots_are_written_per_head() {
        // Buffer [1, 2 heads, 3 slots, 2 wide]; new [1, 2, 1, 2] written at slot 1.
        let mut buffer = Tensor {
            shape: vec![1, 2, 3, 2],
            data: TensorData::Float32(vec![0.0; 12]),
        };
        let new = Tensor {
            shape: vec![1, 2, 1, 2],
            data: TensorData::Float32(vec![1.0, 2.0, 3.0, 4.0]),
        };
        write_slots(&mut buffer, &new, 1, PartKind::Step).unwrap();
        assert_eq!(
            buffer.data,
            TensorData::Float32(vec![0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 4.0, 0.0, 0.0])
        );
        assert!(write_slots(&mut buffer, &new, 3, PartKind::Step).is_err());
    }
}
