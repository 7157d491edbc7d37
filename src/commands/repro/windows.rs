//! Running windows: many windows side by side in one isolation model (each reading the golden
//! run's activations from inputs of its own), one session on the target and one on the
//! comparison per batch; a batch that fails is split in halves until the windows the target
//! cannot run are named. Every window's judgement is kept, so the search never runs one twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context as _, Result};

use super::figures::{departs, figures, peak};
use super::graph::{Feed, Layered, Window};
use super::search::Oracle;
use crate::analyses::layers::points::Quant;
use crate::analyses::layers::state::{quantize, result_of};
use crate::analyses::layers::tap::{isolation_model, unit_name, Unit};
use crate::data::inputs::InputFile;
use crate::data::model::rewrite::write_model;
use crate::data::model::slice::MeasuredType;
use crate::data::model::LoadedModel;
use crate::data::tensor::Tensor;
use crate::execution::exec::executor::target_job;
use crate::execution::exec::{Executor, JobResult, Outcome, PlannedTarget};
use crate::report::repro::{Criterion, OutputFigures};

/// How a window the comparison cannot run is described (the report's notes key on it).
pub const COMPARISON_FAILS: &str = "the comparison cannot run";

/// How a window holding a node with a subgraph is described.
pub const SUBGRAPH: &str = "a node with a subgraph";

/// Layers (counted with repetition over the windows of a batch) one session may hold: beyond
/// this a batch is run in several sessions, so a search over a deep model does not build a
/// model of quadratic size.
const LAYERS_PER_SESSION: usize = 256;

/// What one window showed.
#[derive(Debug, Clone)]
pub struct Judged {
    pub departs: bool,
    /// The target fails on the window while the comparison runs it.
    pub target_fails: bool,
    /// Why the window could not be judged, or the target's error.
    pub error: Option<String>,
    /// The sample with the largest departure, and its figures per output.
    pub worst_sample: usize,
    pub outputs: Vec<OutputFigures>,
}

/// The comparison: another target's run, or the golden activations quantized as the model does.
pub enum Against<'a> {
    Target(&'a PlannedTarget),
    Golden,
}

/// Everything a window run needs, and the judgements so far.
pub struct Evaluator<'a> {
    pub layered: &'a Layered,
    pub model: &'a LoadedModel,
    pub executor: &'a Executor,
    pub target: &'a PlannedTarget,
    pub against: Against<'a>,
    /// The reference run with every paired activation exposed.
    pub golden: &'a JobResult,
    pub input_files: &'a [Vec<InputFile>],
    pub free_dims: &'a [(String, i64)],
    pub criterion: &'a Criterion,
    pub judged: HashMap<Window, Judged>,
    pub sessions: usize,
    /// Whether the golden activations describe what runs (not with scrubbed weights): without
    /// them no SQNR is measured.
    pub golden_applies: bool,
    /// What the search met that the report should say.
    pub notes: Vec<String>,
    feeds: HashMap<(usize, String), (PathBuf, MeasuredType)>,
    batches: usize,
}

impl<'a> Evaluator<'a> {
    /// An evaluator that has run nothing yet.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layered: &'a Layered,
        model: &'a LoadedModel,
        executor: &'a Executor,
        target: &'a PlannedTarget,
        against: Against<'a>,
        golden: &'a JobResult,
        input_files: &'a [Vec<InputFile>],
        free_dims: &'a [(String, i64)],
        criterion: &'a Criterion,
    ) -> Evaluator<'a> {
        Evaluator {
            layered,
            model,
            executor,
            target,
            against,
            golden,
            input_files,
            free_dims,
            criterion,
            judged: HashMap::new(),
            sessions: 0,
            golden_applies: true,
            notes: Vec::new(),
            feeds: HashMap::new(),
            batches: 0,
        }
    }

    /// Judges every window not judged before, in batches that fit a session.
    pub fn judge(&mut self, windows: &[Window]) -> Result<Vec<&Judged>> {
        let mut todo: Vec<Window> = windows
            .iter()
            .copied()
            .filter(|w| !self.judged.contains_key(w))
            .collect();
        todo.dedup();
        let mut batch: Vec<Window> = Vec::new();
        let mut layers = 0;
        for w in todo {
            let n = w.1 - w.0 + 1;
            if !batch.is_empty() && layers + n > LAYERS_PER_SESSION {
                self.run_batch(&std::mem::take(&mut batch))?;
                layers = 0;
            }
            batch.push(w);
            layers += n;
        }
        if !batch.is_empty() {
            self.run_batch(&batch)?;
        }
        windows
            .iter()
            .map(|w| self.judged.get(w).context("a window was not judged"))
            .collect()
    }

    /// Runs one batch: windows that cannot be fed are judged as such, the rest run together.
    fn run_batch(&mut self, windows: &[Window]) -> Result<()> {
        crate::foundation::interrupt::check()?;
        let mut runnable: Vec<(Window, Unit)> = Vec::new();
        for &w in windows {
            let unit = self.layered.unit(w);
            match self.unfeedable(&unit) {
                Some(why) => {
                    self.judged.insert(w, not_judged(why, false));
                }
                None => runnable.push((w, unit)),
            }
        }
        if !runnable.is_empty() {
            self.run_units(&runnable)?;
        }
        Ok(())
    }

    /// Why a unit cannot run fed from the golden run, if it cannot.
    fn unfeedable(&self, unit: &Unit) -> Option<String> {
        if let Some(node) = self.layered.control_flow(unit) {
            return Some(format!("it holds {node}, {SUBGRAPH}"));
        }
        unit.inputs.iter().find_map(|t| self.layered.feed(t).err())
    }

    /// Runs units side by side; a failing batch is split in halves down to single windows.
    /// Each batch's model and outputs are removed once measured (a search over a deep model
    /// runs hundreds of windows); the golden feeds they share stay.
    fn run_units(&mut self, units: &[(Window, Unit)]) -> Result<()> {
        let (dir, target, against) = self.run_sides(units)?;
        let outcome = (result_of(&target), against.as_ref().map(result_of));
        if let (Ok(t), None | Some(Ok(_))) = outcome {
            let a = against.as_ref().and_then(|o| o.result.as_ref());
            for (k, (w, _)) in units.iter().enumerate() {
                let judged = self.measure(k, &units[k].1, t, a);
                self.judged.insert(*w, judged);
            }
            self.executor.discard(&dir);
            return Ok(());
        }
        self.executor.discard(&dir);
        match outcome {
            (Ok(_), None | Some(Ok(_))) => Ok(()),
            _ if units.len() > 1 => {
                let (left, right) = units.split_at(units.len() / 2);
                self.run_units(left)?;
                self.run_units(right)
            }
            (Err(target_error), against) => {
                let fails = matches!(against, None | Some(Ok(_)));
                let why = if fails {
                    target_error
                } else {
                    format!("{COMPARISON_FAILS} it either ({target_error})")
                };
                self.judged.insert(units[0].0, not_judged(why, fails));
                Ok(())
            }
            (Ok(_), Some(Err(e))) => {
                self.judged
                    .insert(units[0].0, not_judged(format!("{COMPARISON_FAILS} it ({e})"), false));
                Ok(())
            }
        }
    }

    /// Writes the batch's model and feeds, and runs it on the target and the comparison.
    fn run_sides(&mut self, units: &[(Window, Unit)]) -> Result<(PathBuf, Outcome, Option<Outcome>)> {
        self.batches += 1;
        let dir = self.executor.work().join("repro").join(format!("b{}", self.batches));
        std::fs::create_dir_all(&dir)?;
        let numbered: Vec<(usize, Unit)> = units.iter().map(|(_, u)| u.clone()).enumerate().collect();
        let samples = self.write_feeds(&numbered)?;
        let model = isolation_model(&self.layered.proto, &numbered, &self.feed_types())
            .ok_or_else(|| anyhow!("a window's input has no known type"))?;
        let path = dir.join("windows.onnx");
        write_model(&model, self.model, &path)?;
        let (target, against) = self.run_model(&path, &samples, &dir)?;
        Ok((dir, target, against))
    }

    /// The types of the inputs fed so far, by tensor name.
    pub fn feed_types(&self) -> HashMap<String, MeasuredType> {
        self.feeds
            .iter()
            .filter(|((s, _), _)| *s == 0)
            .map(|((_, t), (_, ty))| (t.clone(), ty.clone()))
            .collect()
    }

    /// Runs a model on the target and, when the comparison is a target, on it too.
    pub fn run_model(
        &mut self,
        path: &Path,
        samples: &[Vec<InputFile>],
        dir: &Path,
    ) -> Result<(Outcome, Option<Outcome>)> {
        let mut jobs = vec![self.job(self.target, 0, path, samples, dir)?];
        if let Against::Target(a) = self.against {
            jobs.push(self.job(a, 1, path, samples, dir)?);
        }
        self.sessions += jobs.len();
        let mut outcomes = self.executor.run(&jobs)?.into_iter();
        let target = outcomes.next().context("the target's run is missing")?;
        Ok((target, outcomes.next()))
    }

    fn job(
        &self,
        t: &PlannedTarget,
        index: usize,
        model: &Path,
        samples: &[Vec<InputFile>],
        dir: &Path,
    ) -> Result<(crate::execution::exec::Job, PathBuf)> {
        // A window is a temporary model: its compiled context is not stored.
        let model = (model, crate::execution::exec::ModelScope::Part);
        target_job(index, t, model, samples, dir, self.executor.threads(), self.free_dims)
            .ok_or_else(|| anyhow!("{} has no runtime on this machine", t.spec.id))
    }

    /// Every unit input of every sample as the isolation model names it; each golden feed is
    /// written once per sample and shared by every window that reads it.
    fn write_feeds(&mut self, units: &[(usize, Unit)]) -> Result<Vec<Vec<InputFile>>> {
        let mut samples = Vec::with_capacity(self.input_files.len());
        for s in 0..self.input_files.len() {
            let mut sample = Vec::new();
            for (k, unit) in units {
                for t in &unit.inputs {
                    let path = self.feed_file(s, t)?;
                    sample.push(InputFile {
                        name: unit_name(*k, t),
                        path,
                    });
                }
            }
            samples.push(sample);
        }
        Ok(samples)
    }

    /// The file holding input `t` of sample `s`, written on first use.
    fn feed_file(&mut self, s: usize, t: &str) -> Result<PathBuf> {
        if let Some((path, _)) = self.feeds.get(&(s, t.to_string())) {
            return Ok(path.clone());
        }
        let tensor = self.fed_tensor(s, t)?;
        let fdir = self.executor.work().join("repro").join("feeds").join(format!("s{s}"));
        std::fs::create_dir_all(&fdir)?;
        let path = fdir.join(format!("f{}.npy", self.feeds.len()));
        tensor.write_npy(&path)?;
        let ty = MeasuredType {
            elem_type: tensor.dtype().onnx_code(),
            shape: tensor.shape.clone(),
        };
        self.feeds.insert((s, t.to_string()), (path.clone(), ty));
        Ok(path)
    }

    /// The value input `t` of sample `s` is fed: the sample, or the golden activation (as codes
    /// where the model reads codes).
    pub fn fed_tensor(&self, s: usize, t: &str) -> Result<Tensor> {
        match self.layered.feed(t).map_err(|e| anyhow!(e))? {
            Feed::GraphInput(name) => {
                let file = self.input_files[s]
                    .iter()
                    .find(|f| f.name == name)
                    .with_context(|| format!("sample {s} has no input {name}"))?;
                Tensor::read_npy(&file.path)
            }
            Feed::Codes { reference, quant } => {
                let golden = self.golden_tensor(s, &reference)?;
                quantized(&golden, &quant)
            }
            Feed::Float(reference) => self.golden_tensor(s, &reference),
        }
    }

    /// A golden activation of sample `s`: returned by the tapped reference run, or a sample.
    pub fn golden_tensor(&self, s: usize, reference: &str) -> Result<Tensor> {
        if let Some(f) = self
            .golden
            .outputs
            .get(s)
            .and_then(|o| o.iter().find(|f| f.name == reference))
        {
            return Tensor::read_npy(&f.path);
        }
        let file = self.input_files[s]
            .iter()
            .find(|f| f.name == reference)
            .with_context(|| format!("the reference run returned no {reference}"))?;
        Tensor::read_npy(&file.path)
    }

    /// The golden activation at a layer's output `tensor` (floats, as the reference computes it).
    pub fn golden_output(&self, s: usize, tensor: &str) -> Result<Tensor> {
        let p = self
            .layered
            .point_of_tensor(tensor)
            .with_context(|| format!("{tensor} is not a layer's output"))?;
        let r = self
            .layered
            .reference_name(&p.float_name)
            .with_context(|| format!("{tensor} has no counterpart in the reference"))?;
        self.golden_tensor(s, r)
    }

    /// The figures of unit `k` of a batch that ran, on every sample; the worst sample's kept.
    fn measure(&self, k: usize, unit: &Unit, target: &JobResult, against: Option<&JobResult>) -> Judged {
        let mut worst: Option<(usize, Vec<OutputFigures>, bool)> = None;
        for s in 0..self.input_files.len() {
            let name = |t: &str| unit_name(k, t);
            match self.measure_outputs(&unit.outputs, s, s, target, against, &name) {
                Ok((outputs, departed)) => {
                    let score = |o: &[OutputFigures]| o.iter().map(severity).fold(0.0, f64::max);
                    let better = worst
                        .as_ref()
                        .is_none_or(|(_, w, d)| (departed, score(&outputs)) > (*d, score(w)));
                    if better {
                        worst = Some((s, outputs, departed));
                    }
                }
                Err(e) => return not_judged(format!("{e:#}"), false),
            }
        }
        let (worst_sample, outputs, departs) = worst.unwrap_or_default();
        Judged {
            departs,
            target_fails: false,
            error: None,
            worst_sample,
            outputs,
        }
    }

    /// The figures of `outputs` (named in the runs by `name`) of run sample `run` against golden
    /// sample `golden`, and whether some output departs.
    pub fn measure_outputs(
        &self,
        outputs: &[String],
        golden: usize,
        run: usize,
        target: &JobResult,
        against: Option<&JobResult>,
        name: &dyn Fn(&str) -> String,
    ) -> Result<(Vec<OutputFigures>, bool)> {
        let mut figs = Vec::new();
        let mut any = false;
        for tensor in outputs {
            let t = read_output(target, run, &name(tensor))?;
            let quant = self.layered.point_of_tensor(tensor).and_then(|p| p.quant);
            // Read once: the comparison `golden` is made from it, and both sides' SQNR use it.
            let reference = self.golden_output(golden, tensor);
            let a = match (against, &reference) {
                (Some(r), _) => read_output(r, run, &name(tensor))?,
                // The comparison `golden`: the activation quantized as the model does (floats as
                // they are).
                (None, Ok(g)) => match &quant {
                    Some(q) => quantized(g, q)?,
                    None => g.clone(),
                },
                (None, Err(e)) => return Err(anyhow!("{e:#}")),
            };
            let g: Option<Vec<f32>> = reference
                .ok()
                .filter(|_| self.golden_applies)
                .map(|g| (0..g.len()).map(|i| g.data.get_f64(i) as f32).collect());
            let f = figures(tensor, &t, &a, g.as_deref(), quant.as_ref());
            any |= departs(&f, peak(&a, quant.as_ref()), self.criterion);
            figs.push(f);
        }
        Ok((figs, any))
    }

    /// The float twin of input `t` of sample `s`: the golden activation a codes input was
    /// quantized from (the input itself otherwise).
    pub fn float_twin(&self, s: usize, t: &str) -> Result<Tensor> {
        match self.layered.feed(t).map_err(|e| anyhow!(e))? {
            Feed::Codes { reference, .. } | Feed::Float(reference) => self.golden_tensor(s, &reference),
            Feed::GraphInput(_) => self.fed_tensor(s, t),
        }
    }
}

impl Oracle for Evaluator<'_> {
    fn departs(&mut self, windows: &[Window]) -> Result<Vec<bool>> {
        Ok(self.judge(windows)?.into_iter().map(|j| j.departs).collect())
    }
}

/// How far an output is from the comparison, for choosing the worst sample.
fn severity(f: &OutputFigures) -> f64 {
    f.max_steps.map_or(f.max_abs.0, |s| s as f64)
}

/// A window that ran on neither side, or on the comparison only (`target_fails`).
fn not_judged(why: String, target_fails: bool) -> Judged {
    Judged {
        departs: target_fails,
        target_fails,
        error: Some(why),
        worst_sample: 0,
        outputs: Vec::new(),
    }
}

/// An output of one sample from a run.
fn read_output(r: &JobResult, s: usize, name: &str) -> Result<Tensor> {
    let f = r
        .outputs
        .get(s)
        .and_then(|o| o.iter().find(|f| f.name == name))
        .with_context(|| format!("the run returned no {name}"))?;
    Tensor::read_npy(&f.path)
}

/// A float tensor quantized as QuantizeLinear does.
pub fn quantized(t: &Tensor, q: &Quant) -> Result<Tensor> {
    let floats: Vec<f32> = (0..t.len()).map(|i| t.data.get_f64(i) as f32).collect();
    let data = quantize(&floats, q).context("the quantization's code type is not an integer type")?;
    Tensor::new(t.shape.clone(), data)
}
