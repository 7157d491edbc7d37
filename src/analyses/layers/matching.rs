//! Pairs the quantized graph's float-domain tensors with the float reference model's, so that a
//! layer's drift is measured against the reference tensor that plays the same role.
//!
//! Quantizers keep most activation names, derive some from the float name (ONNX Runtime's
//! `logits_QuantizeLinear_Input`), and drop or fold some nodes (ONNX Runtime deletes `Relu` and
//! `Clip` because the QuantizeLinear range clamps; other tools fold `BatchNormalization` into
//! `Conv`). The rules are tried in this order: same name, a known naming convention, then the
//! graph's structure with QuantizeLinear/DequantizeLinear pairs collapsed. Ambiguous structure is
//! left unmatched rather than guessed.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::data::model::topology::{GraphNode, Topology};

/// How a quantized model's tensor was paired with the reference model's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchKind {
    /// The reference has a tensor of the same name.
    Name,
    /// The name is a reference name plus suffixes quantizers append (`_QuantizeLinear_Input`,
    /// `_quantized`, `_dq`, `_token_<N>`, ...).
    Convention,
    /// Found from the graph: same op reading the counterparts of the node's inputs (or the graph
    /// input at the same position), possibly moved past activations the quantizer removed.
    Structure,
}

/// The reference tensor a quantized-graph tensor stands for, and why it was chosen: the report
/// shows the reason so a structural guess can be told from a name match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorMatch {
    /// The reference model's tensor name, to tap in the reference run.
    pub reference: String,
    /// Which rule found it, so the report can say how much to trust the pairing.
    pub how: MatchKind,
}

/// Suffixes quantizers append to a float tensor's name when they name the tensors around it; a
/// name ending in one of them is looked up again without it (repeatedly, so suffixes may stack).
/// - ONNX Runtime QDQ: `_QuantizeLinear_Input` (the float result it renames when the original
///   name must stay the graph output), `_QuantizeLinear_Output`, `_DequantizeLinear_Output`,
///   `_DequantizeLinear` (node names reused as tensor names), `_quantized` and
///   `_output_quantized` (QOperator format), `_dequantized`;
/// - TensorFlow Lite and Qualcomm tools: `_q`, `_dq`, `/QuantizeLinear`, `_fake_quant`.
///
/// ONNX Runtime's layout transformation also appends `_token_<N>` (see [`strip_token`]).
const DERIVED_NAME_SUFFIXES: &[&str] = &[
    "_QuantizeLinear_Input",
    "_QuantizeLinear_Output",
    "_DequantizeLinear_Output",
    "_DequantizeLinear",
    "_output_quantized",
    "_quantized",
    "_dequantized",
    "/QuantizeLinear",
    "_fake_quant",
    "_dq",
    "_q",
];

/// The marker of ONNX Runtime's layout-transformation suffix `_token_<N>`.
const TOKEN_MARKER: &str = "_token_";

/// Reference ops a quantized graph may lack because they were deleted (the QuantizeLinear range
/// does the clamping of `Relu`/`Clip`) or folded into the producer (`BatchNormalization` into
/// `Conv`), or because they compute nothing at inference (`Identity`, `Dropout`).
const ABSORBABLE_OPS: &[&str] = &["Relu", "Clip", "BatchNormalization", "Identity", "Dropout"];

/// Any domain: ONNX Runtime also writes `com.microsoft` QuantizeLinear/DequantizeLinear.
fn is_quantize(n: &GraphNode) -> bool {
    n.op_type == "QuantizeLinear"
}

/// Any domain, like [`is_quantize`].
fn is_dequantize(n: &GraphNode) -> bool {
    n.op_type == "DequantizeLinear"
}

/// Constants and outputs of nodes computed from constants alone: weights, weight Q/DQ chains,
/// shape arithmetic on initializers. Structure treats them as wildcards, weights differ anyway.
fn constant_tensors<'a>(t: &'a Topology, order: &[usize]) -> HashSet<&'a str> {
    let flags = t.constant_nodes(order);
    let mut out: HashSet<&str> = t.constants.iter().map(String::as_str).collect();
    for (n, _) in t.nodes.iter().zip(&flags).filter(|(_, &c)| c) {
        out.extend(n.outputs.iter().filter(|o| !o.is_empty()).map(String::as_str));
    }
    out
}

/// The quantized graph with what every rule needs computed once.
struct Quantized<'a> {
    topo: &'a Topology,
    order: Vec<usize>,
    constant: HashSet<&'a str>,
    producers: HashMap<&'a str, usize>,
}

impl<'a> Quantized<'a> {
    fn new(topo: &'a Topology) -> Self {
        let order = topo.topological_order();
        let constant = constant_tensors(topo, &order);
        Quantized {
            producers: topo.producers(),
            topo,
            order,
            constant,
        }
    }

    fn producer(&self, tensor: &str) -> Option<&'a GraphNode> {
        self.producers.get(tensor).map(|&i| &self.topo.nodes[i])
    }

    /// The float tensor a node input stands for once DequantizeLinear(QuantizeLinear(t)) pairs are
    /// collapsed to `t`; `None` for a constant (or an omitted input).
    fn resolve(&self, mut tensor: &'a str) -> Option<&'a str> {
        // Each step moves to an earlier node, so a valid graph ends the loop; the bound only
        // guards against a cyclic (invalid) file.
        for _ in 0..=self.topo.nodes.len() {
            if tensor.is_empty() || self.constant.contains(tensor) {
                return None;
            }
            match self.dequantized_source(tensor) {
                Some(t) => tensor = t,
                None => return Some(tensor),
            }
        }
        Some(tensor)
    }

    /// `t` when `tensor` is DequantizeLinear(QuantizeLinear(t)).
    fn dequantized_source(&self, tensor: &str) -> Option<&'a str> {
        let dq = self.producer(tensor).filter(|n| is_dequantize(n))?;
        let q = self.producer(dq.inputs.first()?).filter(|n| is_quantize(n))?;
        q.inputs.first().map(String::as_str)
    }

    /// Whether a node computes float-domain activations: not a Q/DQ/Constant node, not
    /// constant-derived.
    fn computes_activations(&self, n: &GraphNode) -> bool {
        !is_quantize(n) && !is_dequantize(n) && n.outputs.iter().any(|o| self.is_dynamic(o))
    }

    fn is_dynamic(&self, tensor: &str) -> bool {
        !tensor.is_empty() && !self.constant.contains(tensor)
    }

    /// The float-domain activations in topological order (see [`float_domain_tensors`]).
    fn float_domain(&self) -> Vec<&'a str> {
        let graph_outputs: HashSet<&str> = self.topo.outputs.iter().map(String::as_str).collect();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut push = |t: &'a str| {
            if seen.insert(t) {
                out.push(t);
            }
        };
        self.topo.inputs.iter().for_each(|t| push(t));
        for n in self.order.iter().map(|&i| &self.topo.nodes[i]) {
            let outputs = n.outputs.iter().filter(|o| self.is_dynamic(o));
            if is_dequantize(n) {
                outputs
                    .filter(|o| graph_outputs.contains(o.as_str()))
                    .for_each(|o| push(o));
            } else if self.computes_activations(n) {
                outputs.for_each(|o| push(o));
            }
        }
        out
    }

    /// For each float tensor, the nodes reading it, looking through Q/DQ pairs.
    fn collapsed_consumers(&self) -> HashMap<&'a str, Vec<&'a GraphNode>> {
        let mut out: HashMap<&str, Vec<&GraphNode>> = HashMap::new();
        for n in self.topo.nodes.iter().filter(|n| !is_quantize(n) && !is_dequantize(n)) {
            for t in n.inputs.iter().filter_map(|t| self.resolve(t)) {
                out.entry(t).or_default().push(n);
            }
        }
        out
    }
}

/// The reference graph with what the rules look up computed once.
struct Reference<'a> {
    topo: &'a Topology,
    constant: HashSet<&'a str>,
    /// Node outputs and graph inputs: the names a quantized tensor may be paired with.
    names: HashSet<&'a str>,
    consumers: HashMap<&'a str, Vec<usize>>,
}

impl<'a> Reference<'a> {
    fn new(topo: &'a Topology) -> Self {
        let names = topo
            .nodes
            .iter()
            .flat_map(|n| &n.outputs)
            .chain(&topo.inputs)
            .filter(|t| !t.is_empty())
            .map(String::as_str)
            .collect();
        Reference {
            constant: constant_tensors(topo, &topo.topological_order()),
            names,
            consumers: topo.consumers(),
            topo,
        }
    }

    /// A node's inputs with constants and omitted inputs as wildcards (`None`).
    fn pattern(&self, n: &'a GraphNode) -> Vec<Option<&'a str>> {
        n.inputs
            .iter()
            .map(|t| Some(t.as_str()).filter(|t| !t.is_empty() && !self.constant.contains(t)))
            .collect()
    }

    fn consumers_of(&self, tensor: &str) -> impl Iterator<Item = &'a GraphNode> + '_ {
        let topo = self.topo;
        self.consumers
            .get(tensor)
            .into_iter()
            .flatten()
            .map(move |&i| &topo.nodes[i])
    }
}

/// Pairs each float-domain activation of the quantized graph with its counterpart in the float
/// reference, so per-layer drift can be measured against fp32 values. Keys are the tensors of
/// [`float_domain_tensors`] that found a counterpart.
pub fn match_tensors(quantized: &Topology, reference: &Topology) -> BTreeMap<String, TensorMatch> {
    let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::Matching);
    let q = Quantized::new(quantized);
    let r = Reference::new(reference);
    let keys = q.float_domain();
    let mut matches = BTreeMap::new();
    for &t in &keys {
        if let Some(m) = by_name(t, &r) {
            matches.insert(t.to_string(), m);
        }
    }
    pair_graph_inputs(quantized, reference, &mut matches);
    match_structurally(&q, &r, &mut matches);
    match_dequantized_outputs(&q, &keys, &mut matches);
    matches
}

/// The quantized graph's float-domain activations, in topological order: graph inputs, every
/// output of a node that is neither QuantizeLinear, DequantizeLinear nor constant-derived, and
/// DequantizeLinear outputs that are graph outputs. Lets the caller list the ones
/// [`match_tensors`] found no counterpart for.
pub fn float_domain_tensors(quantized: &Topology) -> Vec<String> {
    Quantized::new(quantized)
        .float_domain()
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// Rules 1 and 2: the same name, or the name without quantizer suffixes.
fn by_name(tensor: &str, r: &Reference<'_>) -> Option<TensorMatch> {
    if r.names.contains(tensor) {
        return Some(TensorMatch {
            reference: tensor.to_string(),
            how: MatchKind::Name,
        });
    }
    by_convention(tensor, &r.names).map(|reference| TensorMatch {
        reference,
        how: MatchKind::Convention,
    })
}

/// The first reference name reached by stripping known suffixes, shortest strip first.
fn by_convention(tensor: &str, names: &HashSet<&str>) -> Option<String> {
    let mut frontier = vec![tensor];
    let mut seen: HashSet<&str> = HashSet::new();
    while !frontier.is_empty() {
        let next: Vec<&str> = frontier
            .iter()
            .flat_map(|&t| stripped(t))
            .filter(|&t| seen.insert(t))
            .collect();
        if let Some(found) = next.iter().find(|t| names.contains(*t)) {
            return Some(found.to_string());
        }
        frontier = next;
    }
    None
}

/// The names one suffix shorter than `name`.
fn stripped(name: &str) -> Vec<&str> {
    DERIVED_NAME_SUFFIXES
        .iter()
        .filter_map(|s| name.strip_suffix(s))
        .chain(strip_token(name))
        .filter(|t| !t.is_empty())
        .collect()
}

/// `name` without a trailing `_token_<N>` (ONNX Runtime's layout transformation).
fn strip_token(name: &str) -> Option<&str> {
    let (base, n) = name.rsplit_once(TOKEN_MARKER)?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(base)
}

/// Graph inputs left unmatched pair by position when both graphs have as many inputs, unless
/// the reference input at that position is already taken.
fn pair_graph_inputs(q: &Topology, r: &Topology, matches: &mut BTreeMap<String, TensorMatch>) {
    if q.inputs.len() != r.inputs.len() {
        return;
    }
    let taken: HashSet<String> = q
        .inputs
        .iter()
        .filter_map(|t| matches.get(t))
        .map(|m| m.reference.clone())
        .collect();
    for (qi, ri) in q.inputs.iter().zip(&r.inputs) {
        if !matches.contains_key(qi) && !taken.contains(ri) {
            let m = TensorMatch {
                reference: ri.clone(),
                how: MatchKind::Structure,
            };
            matches.insert(qi.clone(), m);
        }
    }
}

/// Rule 3: in topological order, a node whose outputs are not all matched and whose inputs'
/// counterparts are known is paired with the one reference node of the same op reading exactly
/// those counterparts; its outputs take that node's outputs, moved past absorbed activations.
fn match_structurally(q: &Quantized<'_>, r: &Reference<'_>, matches: &mut BTreeMap<String, TensorMatch>) {
    let consumers = q.collapsed_consumers();
    for n in q.order.iter().map(|&i| &q.topo.nodes[i]) {
        if !q.computes_activations(n)
            || n.outputs
                .iter()
                .filter(|o| q.is_dynamic(o))
                .all(|o| matches.contains_key(o))
        {
            continue;
        }
        let Some(counterpart) = reference_node(q, r, n, matches) else {
            continue;
        };
        for (qo, ro) in n.outputs.iter().zip(&counterpart.outputs) {
            if !q.is_dynamic(qo) || ro.is_empty() || matches.contains_key(qo) {
                continue;
            }
            let absorbing = consumers.get(qo.as_str()).map(Vec::as_slice).unwrap_or_default();
            let m = TensorMatch {
                reference: absorb(r, ro, absorbing),
                how: MatchKind::Structure,
            };
            matches.insert(qo.clone(), m);
        }
    }
}

/// The quantized node's inputs as reference tensors (`None` for constants); `None` when some
/// non-constant input has no counterpart yet.
fn counterpart_inputs<'m>(
    q: &Quantized<'_>,
    n: &GraphNode,
    matches: &'m BTreeMap<String, TensorMatch>,
) -> Option<Vec<Option<&'m str>>> {
    n.inputs
        .iter()
        .map(|t| match q.resolve(t) {
            None => Some(None),
            Some(t) => matches.get(t).map(|m| Some(m.reference.as_str())),
        })
        .collect()
}

/// The single reference node with the same op whose non-constant inputs are exactly the
/// counterparts of `n`'s, position by position; `None` when there is none or several.
fn reference_node<'r>(
    q: &Quantized<'_>,
    r: &Reference<'r>,
    n: &GraphNode,
    matches: &BTreeMap<String, TensorMatch>,
) -> Option<&'r GraphNode> {
    let wanted = counterpart_inputs(q, n, matches)?;
    let first = wanted.iter().flatten().next()?;
    let mut candidates = r
        .consumers_of(first)
        .filter(|c| c.op_type == n.op_type && c.domain == n.domain)
        .filter(|c| same_pattern(&wanted, &r.pattern(c)));
    let found = candidates.next()?;
    candidates.next().is_none().then_some(found)
}

/// Position-by-position equality, a missing trailing input counting as a wildcard.
fn same_pattern(a: &[Option<&str>], b: &[Option<&str>]) -> bool {
    (0..a.len().max(b.len())).all(|i| a.get(i).copied().flatten() == b.get(i).copied().flatten())
}

/// Moves a structural match forward past reference activations the quantized graph lacks: while
/// the reference tensor's only consumer is an absorbable op reading it as its first input, and
/// no node of that op reads the quantized tensor, the match moves to that consumer's output.
fn absorb(r: &Reference<'_>, start: &str, quantized_consumers: &[&GraphNode]) -> String {
    let mut tensor = start.to_string();
    // Each step moves to a later node; the bound only guards against a cyclic (invalid) file.
    for _ in 0..r.topo.nodes.len() {
        let Some((op, output)) = absorbed_consumer(r, &tensor) else {
            break;
        };
        if quantized_consumers.iter().any(|c| c.op_type == op) {
            break;
        }
        tensor = output.to_string();
    }
    tensor
}

/// The op and first output of the reference tensor's only consumer, when that is an absorbable
/// op reading the tensor as its first input with constant (or no) other inputs.
fn absorbed_consumer<'r>(r: &Reference<'r>, tensor: &str) -> Option<(&'r str, &'r str)> {
    let mut consumers = r.consumers_of(tensor);
    let c = consumers.next().filter(|_| consumers.next().is_none())?;
    let absorbable = ABSORBABLE_OPS.contains(&c.op_type.as_str()) && c.domain.is_empty();
    let reads_first = c.inputs.first().is_some_and(|t| t == tensor);
    let rest_constant = r.pattern(c).iter().skip(1).all(Option::is_none);
    let output = c.outputs.first().filter(|o| !o.is_empty())?;
    (absorbable && reads_first && rest_constant).then_some((c.op_type.as_str(), output.as_str()))
}

/// DequantizeLinear outputs that are graph outputs and matched by no name take the counterpart
/// of the float tensor they are the Q/DQ image of.
fn match_dequantized_outputs(q: &Quantized<'_>, keys: &[&str], matches: &mut BTreeMap<String, TensorMatch>) {
    for &t in keys {
        let Some(source) = q.resolve(t).filter(|s| *s != t && !matches.contains_key(t)) else {
            continue;
        };
        if let Some(found) = matches.get(source) {
            let m = TensorMatch {
                reference: found.reference.clone(),
                how: MatchKind::Structure,
            };
            matches.insert(t.to_string(), m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::topology::test_node as node;
    use std::collections::BTreeSet;
    use std::path::Path;

    fn topology(nodes: Vec<GraphNode>, inputs: &[&str], outputs: &[&str], constants: &[&str]) -> Topology {
        Topology {
            nodes,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            constants: constants.iter().map(|s| s.to_string()).collect(),
            declared: BTreeMap::new(),
        }
    }

    /// A QuantizeLinear -> DequantizeLinear pair on `t` with ONNX Runtime's names.
    fn qdq(t: &str) -> Vec<GraphNode> {
        let (s, z) = (format!("{t}_scale"), format!("{t}_zero_point"));
        let (q, dq) = (
            format!("{t}_QuantizeLinear_Output"),
            format!("{t}_DequantizeLinear_Output"),
        );
        vec![
            node(&format!("{t}_q"), "QuantizeLinear", &[t, &s, &z], &[&q]),
            node(&format!("{t}_dq"), "DequantizeLinear", &[&q, &s, &z], &[&dq]),
        ]
    }

    /// Scale and zero-point initializer names of [`qdq`] pairs.
    fn qdq_params(tensors: &[&str]) -> Vec<String> {
        tensors
            .iter()
            .flat_map(|t| [format!("{t}_scale"), format!("{t}_zero_point")])
            .collect()
    }

    fn count(m: &BTreeMap<String, TensorMatch>, how: MatchKind) -> usize {
        m.values().filter(|v| v.how == how).count()
    }

    fn reference_of<'m>(m: &'m BTreeMap<String, TensorMatch>, t: &str) -> Option<(&'m str, MatchKind)> {
        m.get(t).map(|m| (m.reference.as_str(), m.how))
    }

    /// The float CNN head: Conv -> BN -> Relu -> Gemm -> `logits`.
    fn float_cnn() -> Topology {
        topology(
            vec![
                node("conv1", "Conv", &["image", "w1", "b1"], &["conv1_out"]),
                node(
                    "bn1",
                    "BatchNormalization",
                    &["conv1_out", "s", "b", "m", "v"],
                    &["bn1_out"],
                ),
                node("relu1", "Relu", &["bn1_out"], &["relu1_out"]),
                node("fc", "Gemm", &["relu1_out", "fw", "fb"], &["logits"]),
            ],
            &["image"],
            &["logits"],
            &["w1", "b1", "s", "b", "m", "v", "fw", "fb"],
        )
    }

    /// What ONNX Runtime's QDQ quantizer makes of [`float_cnn`]: weight Q/DQ chains, the Relu
    /// deleted and its output name given to the BN, the graph output renamed.
    fn ort_qdq_cnn() -> Topology {
        let mut nodes = qdq("w1");
        nodes.extend(qdq("image"));
        nodes.push(node(
            "conv1",
            "Conv",
            &["image_DequantizeLinear_Output", "w1_DequantizeLinear_Output", "b1"],
            &["conv1_out"],
        ));
        nodes.extend(qdq("conv1_out"));
        nodes.push(node(
            "bn1",
            "BatchNormalization",
            &["conv1_out_DequantizeLinear_Output", "s", "b", "m", "v"],
            &["relu1_out"],
        ));
        nodes.extend(qdq("relu1_out"));
        nodes.push(node(
            "fc",
            "Gemm",
            &["relu1_out_DequantizeLinear_Output", "fw", "fb"],
            &["logits_QuantizeLinear_Input"],
        ));
        nodes.push(node(
            "logits_q",
            "QuantizeLinear",
            &["logits_QuantizeLinear_Input", "logits_scale", "logits_zero_point"],
            &["logits_QuantizeLinear_Output"],
        ));
        nodes.push(node(
            "logits_dq",
            "DequantizeLinear",
            &["logits_QuantizeLinear_Output", "logits_scale", "logits_zero_point"],
            &["logits"],
        ));
        let mut constants: Vec<String> = qdq_params(&["w1", "image", "conv1_out", "relu1_out", "logits"]);
        constants.extend(["w1", "b1", "s", "b", "m", "v", "fw", "fb"].map(String::from));
        let constants: Vec<&str> = constants.iter().map(String::as_str).collect();
        topology(nodes, &["image"], &["logits"], &constants)
    }

    #[test]
    fn onnx_runtime_qdq_names_match_by_name_and_convention() {
        let m = match_tensors(&ort_qdq_cnn(), &float_cnn());
        assert_eq!(reference_of(&m, "image"), Some(("image", MatchKind::Name)));
        assert_eq!(reference_of(&m, "conv1_out"), Some(("conv1_out", MatchKind::Name)));
        // The BN output carries the deleted Relu's name: trusted as given.
        assert_eq!(reference_of(&m, "relu1_out"), Some(("relu1_out", MatchKind::Name)));
        assert_eq!(
            reference_of(&m, "logits_QuantizeLinear_Input"),
            Some(("logits", MatchKind::Convention))
        );
        // The DequantizeLinear graph output is float-domain too.
        assert_eq!(reference_of(&m, "logits"), Some(("logits", MatchKind::Name)));
        assert_eq!(m.len(), 5, "{m:?}");
        assert_eq!(
            float_domain_tensors(&ort_qdq_cnn()),
            [
                "image",
                "conv1_out",
                "relu1_out",
                "logits_QuantizeLinear_Input",
                "logits"
            ]
        );
    }

    #[test]
    fn weight_chains_and_constant_derived_nodes_are_never_keys() {
        let mut q = ort_qdq_cnn();
        // Shape arithmetic on initializers, then used by a Reshape of an activation.
        q.nodes.push(node("shape_mul", "Mul", &["shape0", "two"], &["shape1"]));
        q.nodes
            .push(node("flat", "Reshape", &["logits", "shape1"], &["flat_out"]));
        q.constants.extend(["shape0".to_string(), "two".to_string()]);
        let keys = float_domain_tensors(&q);
        for not_key in [
            "w1_QuantizeLinear_Output",
            "w1_DequantizeLinear_Output",
            "image_QuantizeLinear_Output",
            "image_DequantizeLinear_Output",
            "conv1_out_DequantizeLinear_Output",
            "shape1",
        ] {
            assert!(!keys.iter().any(|k| k == not_key), "{not_key} in {keys:?}");
        }
        assert_eq!(keys.last().map(String::as_str), Some("flat_out"));
        let m = match_tensors(&q, &float_cnn());
        assert!(m.keys().all(|k| keys.contains(k)), "{m:?}");
        assert!(!m.contains_key("flat_out"), "no Reshape in the reference");
    }

    /// The float reference of the structure test: Conv -> BN -> Relu, Conv -> Clip, Add, Softmax.
    fn float_block() -> Topology {
        topology(
            vec![
                node("c1", "Conv", &["x", "w1"], &["c1"]),
                node("bn", "BatchNormalization", &["c1", "s", "b", "m", "v"], &["bn"]),
                node("relu", "Relu", &["bn"], &["relu"]),
                node("c2", "Conv", &["relu", "w2"], &["c2"]),
                node("clip", "Clip", &["c2", "lo", "hi"], &["clip"]),
                node("add", "Add", &["relu", "clip"], &["sum"]),
                node("sm", "Softmax", &["sum"], &["probs"]),
            ],
            &["x"],
            &["probs"],
            &["w1", "s", "b", "m", "v", "w2", "lo", "hi"],
        )
    }

    /// [`float_block`] quantized by a tool with its own names: BN folded into the first Conv,
    /// Relu and Clip deleted, every activation through a Q/DQ pair.
    fn renamed_qdq_block() -> Topology {
        let mut nodes = qdq("q/w1");
        nodes.extend(qdq("q/w2"));
        nodes.extend(qdq("q/x"));
        nodes.push(node(
            "q/c1",
            "Conv",
            &["q/x_DequantizeLinear_Output", "q/w1_DequantizeLinear_Output"],
            &["q/a"],
        ));
        nodes.extend(qdq("q/a"));
        nodes.push(node(
            "q/c2",
            "Conv",
            &["q/a_DequantizeLinear_Output", "q/w2_DequantizeLinear_Output"],
            &["q/b"],
        ));
        nodes.extend(qdq("q/b"));
        nodes.push(node(
            "q/add",
            "Add",
            &["q/a_DequantizeLinear_Output", "q/b_DequantizeLinear_Output"],
            &["q/c"],
        ));
        nodes.extend(qdq("q/c"));
        nodes.push(node("q/sm", "Softmax", &["q/c_DequantizeLinear_Output"], &["q/d"]));
        let mut constants = qdq_params(&["q/w1", "q/w2", "q/x", "q/a", "q/b", "q/c"]);
        constants.extend(["q/w1", "q/w2"].map(String::from));
        let constants: Vec<&str> = constants.iter().map(String::as_str).collect();
        topology(nodes, &["q/x"], &["q/d"], &constants)
    }

    #[test]
    fn structure_collapses_qdq_and_absorbs_deleted_and_folded_activations() {
        let q = renamed_qdq_block();
        let m = match_tensors(&q, &float_block());
        assert_eq!(reference_of(&m, "q/x"), Some(("x", MatchKind::Structure)));
        // Conv -> (folded BN) -> (deleted Relu).
        assert_eq!(reference_of(&m, "q/a"), Some(("relu", MatchKind::Structure)));
        assert_eq!(reference_of(&m, "q/b"), Some(("clip", MatchKind::Structure)));
        assert_eq!(reference_of(&m, "q/c"), Some(("sum", MatchKind::Structure)));
        assert_eq!(reference_of(&m, "q/d"), Some(("probs", MatchKind::Structure)));
        assert_eq!(m.len(), float_domain_tensors(&q).len(), "{m:?}");
    }

    #[test]
    fn an_activation_the_quantized_graph_keeps_is_not_absorbed() {
        let mut q = renamed_qdq_block();
        // Keep the Relu after the first Conv: the Conv output is then the BN-folded value only.
        let at = q
            .nodes
            .iter()
            .position(|n| n.name == "q/c1")
            .expect("the test graph has q/c1")
            + 1;
        q.nodes.insert(at, node("q/relu", "Relu", &["q/a0"], &["q/a"]));
        q.nodes[at - 1].outputs = vec!["q/a0".into()];
        let m = match_tensors(&q, &float_block());
        assert_eq!(reference_of(&m, "q/x"), Some(("x", MatchKind::Structure)));
        assert_eq!(reference_of(&m, "q/a0"), Some(("bn", MatchKind::Structure)));
        assert_eq!(reference_of(&m, "q/a"), Some(("relu", MatchKind::Structure)));
    }

    #[test]
    fn two_reference_nodes_of_the_same_op_on_the_same_tensor_stay_unmatched() {
        let r = topology(
            vec![
                node("e1", "Exp", &["x"], &["e1"]),
                node("e2", "Exp", &["x"], &["e2"]),
                node("add", "Add", &["e1", "e2"], &["y"]),
            ],
            &["x"],
            &["y"],
            &[],
        );
        let q = topology(
            vec![
                node("a", "Exp", &["in"], &["a"]),
                node("b", "Exp", &["in"], &["b"]),
                node("c", "Add", &["a", "b"], &["c"]),
                node("d", "Sigmoid", &["in"], &["d"]),
            ],
            &["in"],
            &["c", "d"],
            &[],
        );
        let m = match_tensors(&q, &r);
        assert_eq!(reference_of(&m, "in"), Some(("x", MatchKind::Structure)));
        for unmatched in ["a", "b", "c", "d"] {
            assert!(!m.contains_key(unmatched), "{unmatched}: {m:?}");
        }
    }

    #[test]
    fn conventions_strip_stacked_suffixes_and_layout_tokens() {
        let names: HashSet<&str> = ["conv", "relu", "fc/BiasAdd"].into_iter().collect();
        let found = |t: &str| by_convention(t, &names);
        assert_eq!(found("conv_output_quantized").as_deref(), Some("conv"));
        assert_eq!(found("conv_token_12_QuantizeLinear_Input").as_deref(), Some("conv"));
        assert_eq!(found("relu_dq").as_deref(), Some("relu"));
        assert_eq!(found("fc/BiasAdd/QuantizeLinear").as_deref(), Some("fc/BiasAdd"));
        assert_eq!(found("conv_token_x"), None);
        assert_eq!(found("other_q"), None);
    }

    /// Every tensor of a graph with `prefix` in front, so no name survives.
    fn renamed(t: &Topology, prefix: &str) -> Topology {
        let re = |v: &[String]| -> Vec<String> {
            v.iter()
                .map(|s| {
                    if s.is_empty() {
                        s.clone()
                    } else {
                        format!("{prefix}{s}")
                    }
                })
                .collect()
        };
        let nodes = t
            .nodes
            .iter()
            .map(|n| GraphNode {
                inputs: re(&n.inputs),
                outputs: re(&n.outputs),
                ..n.clone()
            })
            .collect();
        Topology {
            nodes,
            inputs: re(&t.inputs),
            outputs: re(&t.outputs),
            constants: t
                .constants
                .iter()
                .map(|s| format!("{prefix}{s}"))
                .collect::<BTreeSet<_>>(),
            declared: BTreeMap::new(),
        }
    }

    fn fixture(path: &str) -> Topology {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let loaded = crate::data::model::load_model(&path).expect("the fixture loads");
        Topology::of_model(&loaded.proto)
    }

    /// The two quantized fixtures with their fp32 models.
    fn real_pairs() -> [(Topology, Topology); 2] {
        [
            (
                fixture("fixtures/models/cnn_qdq_u8.onnx"),
                fixture("fixtures/models/cnn_fp32.onnx"),
            ),
            (
                fixture("fixtures/real/ppocr_cls_qdq_u8.onnx"),
                fixture("fixtures/real/ppocr_cls_fp32.onnx"),
            ),
        ]
    }

    #[test]
    fn every_float_domain_tensor_of_the_fixtures_is_matched() {
        // Expected figures from the ONNX files with Python `onnx` alone (`python3 - QDQ FP32`):
        // float-domain tensors (graph inputs, outputs of non-Q/DQ nodes not computed from
        // constants only, DQ outputs that are graph outputs), those whose name the fp32 model
        // has (node output or graph input), and the others that have it once
        // `_QuantizeLinear_Input` is removed:
        //   import onnx, sys
        //   q, r = (onnx.load(f).graph for f in sys.argv[1:3])
        //   const, cd, outs = {i.name for i in q.initializer}, set(), {o.name for o in q.output}
        //   t = [i.name for i in q.input if i.name not in const]
        //   for n in q.node:
        //       if n.op_type == "Constant": const.update(n.output); continue
        //       if all(not i or i in const or i in cd for i in n.input): cd.update(n.output); continue
        //       if n.op_type == "QuantizeLinear": continue
        //       t += [o for o in n.output if o and (n.op_type != "DequantizeLinear" or o in outs)]
        //   names = {o for n in r.node for o in n.output} | {i.name for i in r.input}
        //   name = [x for x in t if x in names]
        //   conv = [x for x in t if x not in names and x.removesuffix("_QuantizeLinear_Input") in names]
        //   print(len(t), len(name), len(conv))
        // prints `16 14 2` for cnn_qdq_u8 / cnn_fp32 (the two by convention: `logits` and `probs`
        // with `_QuantizeLinear_Input`) and `207 207 0` for ppocr_cls_qdq_u8 / ppocr_cls_fp32.
        // Cross-check: 14 and 200 QuantizeLinear nodes read a float-domain tensor, and each one's
        // input, that suffix removed, is an fp32 name.
        let expected = [(16, 14, 2), (207, 207, 0)];
        for ((q, r), (total, name, convention)) in real_pairs().iter().zip(expected) {
            let keys = float_domain_tensors(q);
            let m = match_tensors(q, r);
            let unmatched: Vec<&String> = keys.iter().filter(|k| !m.contains_key(*k)).collect();
            assert!(unmatched.is_empty(), "unmatched: {unmatched:?}");
            assert_eq!(keys.len(), total);
            assert_eq!(m.len(), total);
            assert_eq!(count(&m, MatchKind::Name), name);
            assert_eq!(count(&m, MatchKind::Convention), convention);
            assert_eq!(count(&m, MatchKind::Structure), 0);
        }
    }

    #[test]
    fn structure_alone_finds_the_name_matches_of_the_fixtures() {
        // With every quantized name changed, structure (Q/DQ collapsing, deleted Relu/Clip
        // absorbed) must reach the same reference tensors as the names did.
        for (q, r) in real_pairs() {
            let by_names = match_tensors(&q, &r);
            let by_structure = match_tensors(&renamed(&q, "q/"), &r);
            for (k, v) in &by_names {
                let found = reference_of(&by_structure, &format!("q/{k}"));
                assert_eq!(found, Some((v.reference.as_str(), MatchKind::Structure)), "{k}");
            }
            assert_eq!(by_structure.len(), by_names.len());
        }
    }
}
