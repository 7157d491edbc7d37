//! Name patterns users write for targets, nodes and tensors: a glob (`*`, `?`) or `/regex/`.

use anyhow::{Context, Result};
use regex::Regex;

/// A name pattern: `/regex/` or a glob where `*` is any run of characters and `?` one.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub text: String,
    re: Regex,
}

impl Pattern {
    /// Parses one pattern; a bad regular expression is an error naming it.
    pub fn parse(text: &str) -> Result<Pattern> {
        let source = match text.strip_prefix('/').and_then(|t| t.strip_suffix('/')) {
            Some(re) if !re.is_empty() => re.to_string(),
            _ => {
                let mut re = String::from("^");
                for c in text.chars() {
                    match c {
                        '*' => re.push_str(".*"),
                        '?' => re.push('.'),
                        c => re.push_str(&regex::escape(&c.to_string())),
                    }
                }
                re.push('$');
                re
            }
        };
        let re = Regex::new(&source).with_context(|| format!("'{text}' is not a valid pattern"))?;
        Ok(Pattern {
            text: text.to_string(),
            re,
        })
    }

    /// Whether the pattern matches the whole name (globs) or somewhere in it (regexes).
    pub fn matches(&self, name: &str) -> bool {
        self.re.is_match(name)
    }
}
