//! The small English every layer's sentences share (notes, errors, renderings): a count with its
//! noun in the right number, a list cut at a length with how many more. One home, so `1 parts`
//! and a list that drops what it does not show cannot come back in one place.

/// A count with its noun: `1 rule`, `3 rules`.
pub fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", plural_s(n))
}

/// `s` when `n` is not one.
pub fn plural_s(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// At most `max` items joined with `, `, then `and N more` for the rest: a list never hides that
/// it is cut.
pub fn listed<S: AsRef<str>>(items: &[S], max: usize) -> String {
    listed_with(items, max, ", ")
}

/// [`listed`] with another separator (`; ` for items that hold commas).
pub fn listed_with<S: AsRef<str>>(items: &[S], max: usize, separator: &str) -> String {
    let shown: Vec<&str> = items.iter().take(max).map(AsRef::as_ref).collect();
    let mut text = shown.join(separator);
    if items.len() > max {
        text.push_str(&format!(" and {} more", items.len() - max));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_lists_say_what_they_hold() {
        assert_eq!(count(1, "part"), "1 part");
        assert_eq!(count(3, "part"), "3 parts");
        assert_eq!(count(0, "sample"), "0 samples");
        let ids: Vec<String> = (0..21).map(|i| format!("s{i}")).collect();
        assert_eq!(listed(&ids[..2], 8), "s0, s1");
        assert_eq!(listed(&ids, 5), "s0, s1, s2, s3, s4 and 16 more");
    }
}
