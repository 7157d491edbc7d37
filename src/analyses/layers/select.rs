//! Which points a per-layer audit taps: all of them, or those whose op type, node name or tensor
//! name the user named (globs, `/regex/`, or a list in a file). A filter that matches nothing is
//! reported by name; it never stops the output-level audit.

use std::path::PathBuf;

use super::points::Point;
use crate::foundation::pattern::Pattern;
use anyhow::{Context, Result};

/// What the user asked to tap. Filters add up: a point is taken when any filter names it.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Op types (`Softmax`, `LayerNormalization`), exact, case-sensitive as in ONNX.
    pub ops: Vec<String>,
    /// Node names: a glob (`*`, `?`) or `/regex/`.
    pub nodes: Vec<Pattern>,
    /// Tensor names (the tapped tensor, its float name or its reference's name), same forms.
    pub tensors: Vec<Pattern>,
    /// A file with one node or tensor name (or pattern) per line; `#` starts a comment.
    pub list: Option<PathBuf>,
}

impl Selection {
    /// Whether no filter was given (every point is tapped).
    pub fn is_all(&self) -> bool {
        self.ops.is_empty() && self.nodes.is_empty() && self.tensors.is_empty() && self.list.is_none()
    }
}

/// The selected points (indices, in order) and one message per filter that matched nothing.
/// `reference_name` gives a point's counterpart in the reference, when it has one.
pub fn select(
    points: &[Point],
    selection: &Selection,
    reference_name: &dyn Fn(&Point) -> Option<String>,
) -> Result<(Vec<usize>, Vec<String>)> {
    if selection.is_all() {
        return Ok(((0..points.len()).collect(), Vec::new()));
    }
    let mut taken = vec![false; points.len()];
    let mut problems = Vec::new();
    for op in &selection.ops {
        let hits: Vec<usize> = (0..points.len()).filter(|&i| points[i].op_type == *op).collect();
        if hits.is_empty() {
            let mut present: Vec<&str> = points.iter().map(|p| p.op_type.as_str()).collect();
            present.sort_unstable();
            present.dedup();
            problems.push(format!(
                "--op {op} matches no layer (op types present: {})",
                present.join(", ")
            ));
        }
        hits.into_iter().for_each(|i| taken[i] = true);
    }
    let by_node = |p: &Pattern, pt: &Point| p.matches(&pt.node);
    let by_tensor = |p: &Pattern, pt: &Point| {
        p.matches(&pt.tensor) || p.matches(&pt.float_name) || reference_name(pt).is_some_and(|r| p.matches(&r))
    };
    let mut apply = |flag: &str, pattern: &Pattern, test: &dyn Fn(&Pattern, &Point) -> bool| {
        let hits: Vec<usize> = (0..points.len()).filter(|&i| test(pattern, &points[i])).collect();
        if hits.is_empty() {
            problems.push(format!("{flag} {} matches no layer", pattern.text));
        }
        hits.into_iter().for_each(|i| taken[i] = true);
    };
    for pattern in &selection.nodes {
        apply("--node", pattern, &by_node);
    }
    for pattern in &selection.tensors {
        apply("--tensor", pattern, &by_tensor);
    }
    if let Some(path) = &selection.list {
        let text = std::fs::read_to_string(path).with_context(|| format!("--tap-list {}", path.display()))?;
        for (line_no, line) in text.lines().enumerate() {
            let entry = line.split('#').next().unwrap_or("").trim();
            if entry.is_empty() {
                continue;
            }
            let pattern = Pattern::parse(entry).with_context(|| format!("{}:{}", path.display(), line_no + 1))?;
            let flag = format!("{}:{}:", path.display(), line_no + 1);
            apply(&flag, &pattern, &|p, pt| by_node(p, pt) || by_tensor(p, pt));
        }
    }
    Ok(((0..points.len()).filter(|&i| taken[i]).collect(), problems))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(tensor: &str, node: &str, op: &str) -> Point {
        Point {
            tensor: format!("{tensor}_QuantizeLinear_Output"),
            float_name: tensor.into(),
            node: node.into(),
            op_type: op.into(),
            node_index: None,
            q_index: None,
            quant: None,
            inputs: vec![],
        }
    }

    #[test]
    fn filters_add_up_and_report_what_matched_nothing() {
        let pts = vec![
            point("conv1_out", "conv1", "Conv"),
            point("attn", "softmax", "Softmax"),
            point("ln_out", "ln1", "LayerNormalization"),
        ];
        let none = |_: &Point| None;
        let sel = Selection {
            ops: vec!["Softmax".into(), "Gelu".into()],
            nodes: vec![Pattern::parse("ln*").unwrap()],
            tensors: vec![
                Pattern::parse("/^conv[0-9]_out$/").unwrap(),
                Pattern::parse("missing*").unwrap(),
            ],
            list: None,
        };
        let (taken, problems) = select(&pts, &sel, &none).unwrap();
        assert_eq!(taken, vec![0, 1, 2]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("--op Gelu matches no layer (op types present: Conv, LayerNormalization, Softmax)")
        );
        assert_eq!(problems[1], "--tensor missing* matches no layer");
        // Globs match whole names; `?` is one character.
        assert!(Pattern::parse("conv?").unwrap().matches("conv1"));
        assert!(!Pattern::parse("conv?").unwrap().matches("conv12"));
        assert!(Pattern::parse("/(/").is_err());
    }

    #[test]
    fn a_list_file_names_nodes_or_tensors_and_its_lines_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("taps.txt");
        std::fs::write(&path, "# layers to watch\nsoftmax\n\nnothing_here  # typo\n").unwrap();
        let pts = vec![point("conv1_out", "conv1", "Conv"), point("attn", "softmax", "Softmax")];
        let sel = Selection {
            list: Some(path.clone()),
            ..Default::default()
        };
        let (taken, problems) = select(&pts, &sel, &|_| None).unwrap();
        assert_eq!(taken, vec![1]);
        assert_eq!(
            problems,
            vec![format!("{}:4: nothing_here matches no layer", path.display())]
        );
    }
}
