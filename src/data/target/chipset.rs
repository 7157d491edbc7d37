//! Snapdragon chipsets whose Hexagon HTP the QNN backend can compile for, with the SoC model id
//! and HTP architecture QNN needs (without them real models fail to finalize with error 1002).

/// One Snapdragon chipset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chipset {
    /// Qualcomm part number, lower case (`sm8650`).
    pub sm: &'static str,
    /// Marketing name without the "Snapdragon" prefix.
    pub marketing: &'static str,
    /// QNN `soc_model` id.
    pub soc_model: u32,
    /// QNN `htp_arch` (68 = v68, ...).
    pub htp_arch: u32,
}

/// Every chipset the audit knows, oldest first.
pub const CHIPSETS: &[Chipset] = &[
    Chipset {
        sm: "sm8350",
        marketing: "888",
        soc_model: 30,
        htp_arch: 68,
    },
    Chipset {
        sm: "sm8450",
        marketing: "8 Gen 1",
        soc_model: 36,
        htp_arch: 69,
    },
    Chipset {
        sm: "sm8475",
        marketing: "8+ Gen 1",
        soc_model: 42,
        htp_arch: 69,
    },
    Chipset {
        sm: "sm8550",
        marketing: "8 Gen 2",
        soc_model: 43,
        htp_arch: 73,
    },
    Chipset {
        sm: "sm8635",
        marketing: "8s Gen 3",
        soc_model: 68,
        htp_arch: 73,
    },
    Chipset {
        sm: "sm8650",
        marketing: "8 Gen 3",
        soc_model: 57,
        htp_arch: 75,
    },
    Chipset {
        sm: "sm8750",
        marketing: "8 Elite",
        soc_model: 69,
        htp_arch: 79,
    },
    Chipset {
        sm: "sm8735",
        marketing: "8s Gen 4",
        soc_model: 85,
        htp_arch: 79,
    },
    Chipset {
        sm: "sm8850",
        marketing: "8 Elite Gen 5",
        soc_model: 87,
        htp_arch: 81,
    },
];

/// Lower-cases and drops spaces, dashes, underscores and a leading "snapdragon".
fn normalize(text: &str) -> String {
    let s: String = text
        .chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect();
    s.strip_prefix("snapdragon").map(str::to_string).unwrap_or(s)
}

impl Chipset {
    /// Finds a chipset by part number (`sm8650`, `SM8650`) or marketing name (`8 Gen 3`,
    /// `8gen3`, `Snapdragon 8 Gen 3`).
    pub fn find(name: &str) -> Option<Chipset> {
        let wanted = normalize(name);
        CHIPSETS
            .iter()
            .copied()
            .find(|c| c.sm == wanted || normalize(c.marketing) == wanted)
    }

    /// "Snapdragon 8 Gen 3 (SM8650, HTP v75)".
    pub fn describe(&self) -> String {
        format!(
            "Snapdragon {} ({}, HTP v{})",
            self.marketing,
            self.sm.to_uppercase(),
            self.htp_arch
        )
    }
}

/// Android board platforms (`ro.board.platform`, and kernel codenames) and the chipsets that
/// report them. One platform can stand for several parts (`taro`: SM8450 and SM8475;
/// `pineapple`: SM8650 and SM8635; `sun`: SM8750 and SM8735), and then only `ro.soc.model`
/// decides. Seen in device trees and getprop captures of shipping phones.
const BOARD_PLATFORMS: &[(&str, &[&str])] = &[
    ("lahaina", &["sm8350"]),
    ("taro", &["sm8450", "sm8475"]),
    ("kalama", &["sm8550"]),
    ("cliffs", &["sm8635"]),
    ("pineapple", &["sm8650", "sm8635"]),
    ("sun", &["sm8750", "sm8735"]),
    ("tuna", &["sm8735"]),
    ("canoe", &["sm8850"]),
];

/// Chipsets a report can name that have no HTP simulation target here (the audit cannot
/// reproduce them, but must not mistake them for another part).
const NOT_SIMULATED: &[(&str, &[&str])] = &[
    ("Snapdragon X Elite (SC8380XP)", &["sc8380", "xelite", "x1e"]),
    (
        "Snapdragon X Plus (SC8340XP)",
        &["sc8340", "xplus", "xplus8core", "x1p"],
    ),
];

/// What one spelling of a chipset names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spelling {
    /// Exactly one chipset the audit can simulate.
    Chipset(Chipset),
    /// Several (a board platform shared by parts), by part number.
    OneOf(Vec<&'static str>),
    /// A known chipset without a simulation target, by its description.
    NotSimulated(&'static str),
    /// Nothing this table knows.
    Unknown,
}

/// Drops the prefixes AI Hub and vendors put before a chipset's name (`chipset:`, `qualcomm`,
/// `qcom`, `snapdragon`), after [`normalize`].
fn bare(text: &str) -> String {
    let mut s = normalize(text);
    for prefix in ["chipset:", "qualcomm", "qcom,", "qcom", "snapdragon"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest.to_string();
        }
    }
    // AI Hub's Samsung variants (`qualcomm-snapdragon-8-elite-for-galaxy`) are the same part.
    s.strip_suffix("forgalaxy").map(str::to_string).unwrap_or(s)
}

impl Chipset {
    /// Reads any spelling a device or a service uses: part numbers (`SM8650`, `sm8650-ab`),
    /// marketing names, AI Hub chipset attributes (`chipset:qualcomm-snapdragon-8gen3`), board
    /// platforms (`pineapple`).
    pub fn from_spelling(text: &str) -> Spelling {
        let s = bare(text);
        if s.is_empty() {
            return Spelling::Unknown;
        }
        // A part number with a suffix (`sm8650ab`, `sc8380xp`): its first six characters.
        let part = match s.get(..6) {
            Some(p) if (p.starts_with("sm") || p.starts_with("sc")) && p[2..].chars().all(|c| c.is_ascii_digit()) => p,
            _ => s.as_str(),
        };
        if let Some(c) = Chipset::find(&s).or_else(|| Chipset::find(part)) {
            return Spelling::Chipset(c);
        }
        if let Some((_, parts)) = BOARD_PLATFORMS.iter().find(|(b, _)| *b == s) {
            return match parts {
                [one] => Chipset::find(one).map_or(Spelling::Unknown, Spelling::Chipset),
                many => Spelling::OneOf(many.to_vec()),
            };
        }
        NOT_SIMULATED
            .iter()
            .find(|(_, names)| names.iter().any(|n| s == *n || part == *n))
            .map_or(Spelling::Unknown, |(d, _)| Spelling::NotSimulated(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_to_the_table() {
        assert_eq!(Chipset::find("SM8650").unwrap().soc_model, 57);
        assert_eq!(Chipset::find("8 Gen 3").unwrap().sm, "sm8650");
        assert_eq!(Chipset::find("snapdragon-8-elite").unwrap().htp_arch, 79);
        assert_eq!(Chipset::find("8+gen1").unwrap().soc_model, 42);
        assert_eq!(Chipset::find("8s gen 3").unwrap().sm, "sm8635");
        assert_eq!(Chipset::find("888").unwrap().htp_arch, 68);
        assert!(Chipset::find("8 gen 9").is_none());
    }

    #[test]
    fn every_spelling_a_report_uses_resolves_or_says_it_cannot() {
        let sm = |t: &str| match Chipset::from_spelling(t) {
            Spelling::Chipset(c) => c.sm,
            other => panic!("{t}: {other:?}"),
        };
        assert_eq!(sm("SM8650"), "sm8650");
        assert_eq!(sm("SM8650-AB"), "sm8650");
        assert_eq!(sm("chipset:qualcomm-snapdragon-8gen3"), "sm8650");
        assert_eq!(sm("qualcomm-snapdragon-8-elite"), "sm8750");
        assert_eq!(sm("qualcomm-snapdragon-8-elite-for-galaxy"), "sm8750");
        assert_eq!(
            Chipset::from_spelling("pineapple"),
            Spelling::OneOf(vec!["sm8650", "sm8635"])
        );
        assert_eq!(Chipset::from_spelling("sun"), Spelling::OneOf(vec!["sm8750", "sm8735"]));
        assert_eq!(sm("lahaina"), "sm8350");
        assert_eq!(sm("Snapdragon 8 Gen 2"), "sm8550");
        assert_eq!(
            Chipset::from_spelling("taro"),
            Spelling::OneOf(vec!["sm8450", "sm8475"])
        );
        assert!(matches!(
            Chipset::from_spelling("Snapdragon X Elite"),
            Spelling::NotSimulated(_)
        ));
        assert!(matches!(Chipset::from_spelling("SC8380XP"), Spelling::NotSimulated(_)));
        assert_eq!(Chipset::from_spelling("exynos2400"), Spelling::Unknown);
        assert_eq!(Chipset::from_spelling(""), Spelling::Unknown);
    }
}
