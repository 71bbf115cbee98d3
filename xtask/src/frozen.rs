//! ABI version 1, frozen: what `cargo xtask abi` found on each target when
//! version 1 shipped, kept in `abi-tests/abi-v1.txt`, and the check that
//! today's build still has it.
//!
//! The other checks compare the two sides of one build (the Rust layout
//! with the header's, a C caller's names with the library's); a change made
//! on both sides at once passes them. This one compares each target's build
//! with the record as version 1 defined it: its layout value for value, and
//! every name a C caller linked and every name the shared library exported
//! then, which must still be there (names may be added, none removed nor
//! changed). `cargo xtask abi --bless` writes the file from a run that
//! passed every other check: for a new target, or a new ABI version (and a
//! new file) alone.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::layout_report::Layout;

/// Where the frozen ABI is kept, from the workspace's root.
pub(crate) const FILE: &str = "abi-tests/abi-v1.txt";

/// What one target's build showed: the record's layout, the names a C
/// caller links (as the compiler decorates them), and the hostcopy names
/// the shared library exports (`None`: the target has no shared library).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Abi {
    pub(crate) layout: Layout,
    pub(crate) symbols: Vec<String>,
    pub(crate) exports: Option<Vec<String>>,
}

/// The frozen ABI: one [`Abi`] per target triple.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Frozen {
    pub(crate) targets: BTreeMap<String, Abi>,
}

const HEADER: &str = "\
# hostcopy C ABI version 1, frozen: what `cargo xtask abi` found on each
# target when it shipped. Checked at every run: the layout must be the same
# value for value, and every name listed must still be linked and exported
# (names may be added). Written by `cargo xtask abi --bless`, for a new
# target or a new ABI version (and a new file) alone.
#
# target | layout: size align offsetof dst src nbytes, sizeof dst src nbytes,
#          ABI version, pointer size | a C caller's names | shared exports
";

impl Frozen {
    /// Reads the file's text: `triple | layout N N N N N N N N N N | names,
    /// ... | exports, ... or -`, `#` lines and blank lines ignored.
    pub(crate) fn parse(text: &str) -> Result<Frozen, String> {
        let mut targets = BTreeMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |what: &str| format!("{FILE} line {}: {what}", number + 1);
            let fields: Vec<&str> = line.split('|').map(str::trim).collect();
            let [triple, layout, symbols, exports] = fields.as_slice() else {
                return Err(at("expected `triple | layout ... | names | exports`"));
            };
            let values: Vec<u32> = layout
                .strip_prefix("layout")
                .ok_or_else(|| at("the second field starts with `layout`"))?
                .split_whitespace()
                .map(|value| value.parse().map_err(|_| at(&format!("`{value}` is not a number"))))
                .collect::<Result<_, _>>()?;
            let values: [u32; 10] = values.try_into().map_err(|_| at("a layout has ten values"))?;
            let names = |list: &str| -> Vec<String> {
                list.split(',').map(str::trim).filter(|name| !name.is_empty()).map(str::to_owned).collect()
            };
            let exports = match *exports {
                "-" => None,
                list => Some(names(list)),
            };
            let abi = Abi { layout: Layout::from_values(values), symbols: names(symbols), exports };
            if targets.insert((*triple).to_owned(), abi).is_some() {
                return Err(at(&format!("{triple} is listed twice")));
            }
        }
        Ok(Frozen { targets })
    }

    /// The file's text, [`parse`](Self::parse)'s inverse.
    pub(crate) fn render(&self) -> String {
        let mut text = HEADER.to_owned();
        for (triple, abi) in &self.targets {
            let values: Vec<String> = abi.layout.values().iter().map(u32::to_string).collect();
            let exports = abi.exports.as_ref().map_or("-".to_owned(), |names| names.join(", "));
            writeln!(text, "{triple} | layout {} | {} | {exports}", values.join(" "), abi.symbols.join(", "))
                .expect("writing to a String");
        }
        text
    }

    /// Whether `found` on `triple` still is ABI version 1: a short summary,
    /// or every difference.
    pub(crate) fn check(&self, triple: &str, found: &Abi) -> Result<String, String> {
        let Some(frozen) = self.targets.get(triple) else {
            return Err(format!(
                "{triple} is not in {FILE}: a new target joins the frozen ABI with `cargo xtask abi --bless`"
            ));
        };
        let mut differences = found.layout.differences_from(&frozen.layout, "frozen", "now");
        for name in &frozen.symbols {
            if !found.symbols.contains(name) {
                differences.push(format!("a C caller of version 1 links `{name}`, which a caller no longer does"));
            }
        }
        match (&frozen.exports, &found.exports) {
            (Some(frozen), Some(found)) => {
                for name in frozen.iter().filter(|name| !found.contains(name)) {
                    differences.push(format!("the shared library no longer exports `{name}`"));
                }
            }
            (Some(_), None) => differences.push("the target no longer builds a shared library".to_owned()),
            (None, _) => {}
        }
        if differences.is_empty() {
            Ok("version 1".to_owned())
        } else {
            Err(format!("not ABI version 1 as frozen in {FILE}: {}", differences.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LP64: [u32; 10] = [24, 8, 0, 8, 16, 8, 8, 8, 1, 8];

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    fn frozen() -> Frozen {
        let abi = Abi {
            layout: Layout::from_values(LP64),
            symbols: names(&["hostcopy_abi_version", "hostcopy_fn", "hostcopy_rejected"]),
            exports: Some(names(&["hostcopy_abi_version", "hostcopy_fn", "hostcopy_rejected"])),
        };
        let firmware = Abi { exports: None, ..abi.clone() };
        Frozen {
            targets: BTreeMap::from([
                ("x86_64-unknown-linux-gnu".to_owned(), abi),
                ("thumbv7em-none-eabihf".to_owned(), firmware),
            ]),
        }
    }

    #[test]
    fn the_file_reads_back_what_was_written() {
        let frozen = frozen();
        assert_eq!(Frozen::parse(&frozen.render()), Ok(frozen));
        assert!(Frozen::parse("a | layout 1 2 3 | x | -").is_err(), "ten values");
        assert!(Frozen::parse("a | layout 1 2 3 4 5 6 7 8 9 10 | x").is_err(), "four fields");
        let twice = "a | layout 1 2 3 4 5 6 7 8 9 10 | x | -\na | layout 1 2 3 4 5 6 7 8 9 10 | x | -";
        assert!(Frozen::parse(twice).unwrap_err().contains("twice"));
    }

    #[test]
    fn the_same_build_passes_and_an_added_name_too() {
        let frozen = frozen();
        let mut found = frozen.targets["x86_64-unknown-linux-gnu"].clone();
        assert!(frozen.check("x86_64-unknown-linux-gnu", &found).is_ok());
        found.symbols.push("hostcopy_stager_new".to_owned());
        found.exports.as_mut().unwrap().push("hostcopy_stager_new".to_owned());
        assert!(frozen.check("x86_64-unknown-linux-gnu", &found).is_ok());
        let firmware = frozen.targets["thumbv7em-none-eabihf"].clone();
        assert!(frozen.check("thumbv7em-none-eabihf", &firmware).is_ok());
    }

    #[test]
    fn a_changed_field_or_a_removed_name_fails_with_what_changed() {
        let frozen = frozen();
        let triple = "x86_64-unknown-linux-gnu";
        let moved =
            Abi { layout: Layout::from_values([24, 8, 16, 8, 0, 8, 8, 8, 1, 8]), ..frozen.targets[triple].clone() };
        let error = frozen.check(triple, &moved).unwrap_err();
        assert!(error.contains("offsetof dst: frozen 0, now 16"), "{error}");
        let mut renamed = frozen.targets[triple].clone();
        renamed.symbols.retain(|name| name != "hostcopy_fn");
        renamed.symbols.push("hostcopy_fn_v2".to_owned());
        let error = frozen.check(triple, &renamed).unwrap_err();
        assert!(error.contains("links `hostcopy_fn`"), "{error}");
        let mut unexported = frozen.targets[triple].clone();
        unexported.exports.as_mut().unwrap().retain(|name| name != "hostcopy_rejected");
        assert!(frozen.check(triple, &unexported).unwrap_err().contains("no longer exports `hostcopy_rejected`"));
        let static_only = Abi { exports: None, ..frozen.targets[triple].clone() };
        assert!(frozen.check(triple, &static_only).is_err());
        assert!(frozen.check("riscv64gc-unknown-linux-gnu", &static_only).unwrap_err().contains("--bless"));
    }
}
