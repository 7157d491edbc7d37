//! Greedy CTC decoding, as PaddleOCR decodes its text recognizers: the best class at every time
//! step, repeats collapsed, the blank (class 0) dropped, each class mapped to its character
//! (class `i` is the vocabulary's line `i`, and one class past the vocabulary is a space when the
//! model has it); and the edit distances that score a reading.

/// The characters of a recognizer's classes: class 0 is the blank, class `i` the vocabulary's
/// `i`-th entry (1-based), and, when the model has one more class, a space.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Vocabulary {
    chars: Vec<String>,
}

impl Vocabulary {
    /// The vocabulary of a file with one entry per line (as PaddleOCR's dictionaries), for a model
    /// with `classes` output classes: `len + 1` (blank and the entries) or `len + 2` (a space
    /// last). Any other count is refused: the file is not this model's dictionary.
    pub fn from_lines(text: &str, classes: usize) -> Result<Vocabulary, String> {
        // Every line is an entry, as PaddleOCR reads its dictionaries (a line of one space is a
        // space; an empty line is an empty entry).
        let mut chars: Vec<String> = text
            .lines()
            .map(|l| l.strip_suffix('\r').unwrap_or(l).to_string())
            .collect();
        match classes.checked_sub(chars.len()) {
            Some(1) => {}
            Some(2) => chars.push(" ".into()),
            _ => {
                return Err(format!(
                    "the vocabulary has {} entries; the model's {classes} classes need {} (blank first) or {} (and a space last)",
                    chars.len(),
                    classes.saturating_sub(1),
                    classes.saturating_sub(2)
                ))
            }
        }
        Ok(Vocabulary { chars })
    }

    /// How many classes it covers, the blank included.
    pub fn classes(&self) -> usize {
        self.chars.len() + 1
    }

    /// The text of a sequence of per-step best classes.
    pub fn decode(&self, best: &[usize]) -> String {
        let mut out = String::new();
        let mut previous = None;
        for &c in best {
            if Some(c) != previous && c != 0 {
                if let Some(ch) = self.chars.get(c - 1) {
                    out.push_str(ch);
                }
            }
            previous = Some(c);
        }
        out
    }
}

/// The best class at each of `steps` time steps of a `[steps, classes]` score array (row-major),
/// the first on ties as `argmax` takes it.
pub fn best_classes(scores: &[f64], steps: usize, classes: usize) -> Vec<usize> {
    (0..steps)
        .map(|t| {
            let row = &scores[t * classes..(t + 1) * classes];
            row.iter()
                .enumerate()
                // NumPy's argmax: the first NaN wins, else the first of the highest.
                .try_fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &v)| {
                    if v.is_nan() {
                        Err(i)
                    } else if v > bv {
                        Ok((i, v))
                    } else {
                        Ok((bi, bv))
                    }
                })
                .map_or_else(|nan| nan, |(i, _)| i)
        })
        .collect()
}

/// The Levenshtein distance between two sequences (insertions, deletions, substitutions).
pub fn edit_distance<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(x != y);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// How a reading scores against its label: character and word edits, their counts in the label,
/// and whether it is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub char_edits: usize,
    pub label_chars: usize,
    pub word_edits: usize,
    pub label_words: usize,
    pub exact: bool,
}

/// Scores `predicted` against `label` (characters are Unicode scalar values; words are separated
/// by whitespace).
pub fn score(predicted: &str, label: &str) -> Reading {
    let (p, l): (Vec<char>, Vec<char>) = (predicted.chars().collect(), label.chars().collect());
    let (pw, lw): (Vec<&str>, Vec<&str>) = (
        predicted.split_whitespace().collect(),
        label.split_whitespace().collect(),
    );
    Reading {
        char_edits: edit_distance(&p, &l),
        label_chars: l.len(),
        word_edits: edit_distance(&pw, &lw),
        label_words: lw.len(),
        exact: predicted == label,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_decoding_collapses_repeats_and_drops_blanks() {
        let v = Vocabulary::from_lines("a\nb\nc\n", 5).unwrap();
        assert_eq!(v.classes(), 5);
        // a a blank a b b space c  ->  "aab c"
        assert_eq!(v.decode(&[1, 1, 0, 1, 2, 2, 4, 3]), "aab c");
        assert_eq!(v.decode(&[0, 0]), "");
        assert!(Vocabulary::from_lines("a\nb\n", 6).is_err());
        assert_eq!(Vocabulary::from_lines("a\nb\n", 3).unwrap().decode(&[2, 1]), "ba");
    }

    #[test]
    fn best_classes_take_the_first_of_equal_scores() {
        let scores = [0.1, 0.7, 0.2, 0.5, 0.5, 0.0];
        assert_eq!(best_classes(&scores, 2, 3), vec![1, 0]);
        // np.argmax([0.9, nan, nan]) == 1.
        assert_eq!(best_classes(&[0.9, f64::NAN, f64::NAN], 1, 3), vec![1]);
    }

    #[test]
    fn edit_distances_are_levenshteins() {
        let d = |a: &str, b: &str| edit_distance(&a.chars().collect::<Vec<_>>(), &b.chars().collect::<Vec<_>>());
        assert_eq!(d("kitten", "sitting"), 3);
        assert_eq!(d("", "abc"), 3);
        assert_eq!(d("flaw", "lawn"), 2);
        let r = score("the quik fox", "the quick brown fox");
        assert_eq!(
            (r.char_edits, r.label_chars, r.word_edits, r.label_words, r.exact),
            (7, 19, 2, 4, false)
        );
        assert!(score("é", "é").exact);
    }
}
