//! Reading the record's layout out of what each side built for a target.
//!
//! `abi-tests/src/layout.rs` (Rust) and `abi-tests/c/layout_report.c` (C)
//! each put a 16-byte marker followed by ten 32-bit values into an object
//! file. Scanning the bytes finds them in ELF, COFF and wasm objects alike,
//! without linking or running anything built for the target; the values are
//! in the target's byte order. The C consumer program prints the same ten
//! values as a text line, which is read here too.

use std::fmt;

use crate::targets::Endian;

/// The marker before the values: `b"HOSTCOPY-LAYOUT\0"` on both sides.
pub(crate) const MAGIC: &[u8; 16] = b"HOSTCOPY-LAYOUT\0";

/// The facts both sides report about `struct hostcopy_args` / `HostCopyArgs`,
/// in report order (see [`FIELD_NAMES`]). Only compared, printed and checked
/// against the contract here, so the values stay a list: the named struct
/// lives in `abi-tests/src/layout.rs`, which writes the Rust side.
///
/// The field sizes matter: on a 64-bit target a `uint32_t nbytes` keeps the
/// struct's size (padding) and every offset, and shows only in them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    values: [u32; FIELDS],
}

const FIELDS: usize = 10;
const FIELD_NAMES: [&str; FIELDS] = [
    "size",
    "align",
    "offsetof dst",
    "offsetof src",
    "offsetof nbytes",
    "sizeof dst",
    "sizeof src",
    "sizeof nbytes",
    "ABI version",
    "pointer size",
];
/// Where the ABI version sits in the report.
const ABI_VERSION: usize = 8;

impl Layout {
    pub(crate) const fn from_values(values: [u32; FIELDS]) -> Self {
        Layout { values }
    }

    pub(crate) const fn values(&self) -> [u32; FIELDS] {
        self.values
    }

    /// Finds the report in an object file. Exactly one distinct report must be
    /// there: two that disagree mean the scan found something else.
    pub(crate) fn from_object(bytes: &[u8], endian: Endian) -> Result<Self, String> {
        let report_len = MAGIC.len() + 4 * FIELDS;
        let mut found: Option<Layout> = None;
        let mut at = 0;
        while let Some(offset) = find(&bytes[at..], MAGIC) {
            let start = at + offset;
            at = start + 1;
            let Some(report) = bytes.get(start..start + report_len) else {
                return Err(format!(
                    "layout marker at byte {start} is cut off: the object ends before the ten values"
                ));
            };
            let mut values = [0u32; FIELDS];
            for (value, word) in values.iter_mut().zip(report[MAGIC.len()..].chunks_exact(4)) {
                let word: [u8; 4] = word.try_into().expect("chunks of four");
                *value = match endian {
                    Endian::Little => u32::from_le_bytes(word),
                    Endian::Big => u32::from_be_bytes(word),
                };
            }
            let layout = Layout::from_values(values);
            match found {
                Some(earlier) if earlier != layout => {
                    return Err(format!(
                        "two different layout reports in one object: {earlier} and {layout}"
                    ));
                }
                _ => found = Some(layout),
            }
        }
        found.ok_or_else(|| "no layout report (marker HOSTCOPY-LAYOUT) in the object".to_owned())
    }

    /// Reads the line the C consumer prints:
    /// `layout size=24 align=8 dst=0 src=8 nbytes=16 dst_size=8 src_size=8
    /// nbytes_size=8 abi=1 pointer=8`.
    pub(crate) fn from_consumer_output(output: &str) -> Result<Self, String> {
        let line = output
            .lines()
            .find_map(|line| line.strip_prefix("layout "))
            .ok_or("no `layout ...` line in the C consumer's output")?;
        let keys = [
            "size",
            "align",
            "dst",
            "src",
            "nbytes",
            "dst_size",
            "src_size",
            "nbytes_size",
            "abi",
            "pointer",
        ];
        let mut values = [0u32; FIELDS];
        for (value, key) in values.iter_mut().zip(keys) {
            let text = line
                .split_whitespace()
                .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
                .ok_or_else(|| format!("`{key}=` missing in `layout {line}`"))?;
            *value = text
                .parse()
                .map_err(|_| format!("`{key}={text}` is not a number in `layout {line}`"))?;
        }
        Ok(Layout::from_values(values))
    }

    /// Every field where the two differ, with both values: empty when they agree.
    pub(crate) fn differences(&self, rust: &Layout, this_side: &str) -> Vec<String> {
        FIELD_NAMES
            .iter()
            .zip(rust.values().iter().zip(self.values()))
            .filter(|(_, (r, c))| **r != *c)
            .map(|(name, (r, c))| format!("{name}: Rust {r}, {this_side} {c}"))
            .collect()
    }

    /// Whether the layout is what the contract says for a pointer width.
    pub(crate) fn contract_violations(&self, pointer_width: u32) -> Vec<String> {
        let word = pointer_width / 8;
        let abi_version = self.values[ABI_VERSION];
        // Three words in a row, each one word long, aligned to a word.
        let expected = Layout::from_values([
            3 * word,
            word,
            0,
            word,
            2 * word,
            word,
            word,
            word,
            abi_version,
            word,
        ]);
        FIELD_NAMES
            .iter()
            .zip(expected.values().iter().zip(self.values()))
            .filter(|(_, (e, v))| **e != *v)
            .map(|(name, (e, v))| format!("{name} is {v}, the contract says {e}"))
            .collect()
    }
}

/// `size/align/offsetof dst,src,nbytes/sizeof dst,src,nbytes`, as in the table.
impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [
            size,
            align,
            dst,
            src,
            nbytes,
            dst_size,
            src_size,
            nbytes_size,
            ..,
        ] = self.values;
        write!(
            f,
            "{size}/{align}/{dst},{src},{nbytes}/{dst_size},{src_size},{nbytes_size}"
        )
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object_with(report_values: [u32; FIELDS], endian: Endian) -> Vec<u8> {
        let mut bytes = b"\x7fELF some header bytes".to_vec();
        bytes.extend_from_slice(MAGIC);
        for v in report_values {
            bytes.extend_from_slice(&match endian {
                Endian::Little => v.to_le_bytes(),
                Endian::Big => v.to_be_bytes(),
            });
        }
        bytes.extend_from_slice(b"trailing symbol table");
        bytes
    }

    const LP64: [u32; FIELDS] = [24, 8, 0, 8, 16, 8, 8, 8, 1, 8];

    #[test]
    fn report_is_decoded_in_the_targets_byte_order() {
        for endian in [Endian::Little, Endian::Big] {
            let layout = Layout::from_object(&object_with(LP64, endian), endian).unwrap();
            assert_eq!(layout.values(), LP64);
            assert!(layout.contract_violations(64).is_empty());
        }
    }

    #[test]
    fn wrong_byte_order_shows_as_a_contract_violation() {
        let layout = Layout::from_object(&object_with(LP64, Endian::Big), Endian::Little).unwrap();
        assert_eq!(
            layout.values()[0],
            24 << 24,
            "size read in the wrong byte order"
        );
        assert!(!layout.contract_violations(64).is_empty());
    }

    #[test]
    fn object_without_a_report_is_an_error() {
        let error = Layout::from_object(b"just some bytes", Endian::Little).unwrap_err();
        assert!(error.contains("no layout report"), "{error}");
    }

    #[test]
    fn report_cut_off_at_the_end_is_an_error() {
        let mut bytes = object_with(LP64, Endian::Little);
        let magic_at = find(&bytes, MAGIC).unwrap();
        bytes.truncate(magic_at + MAGIC.len() + 8);
        assert!(Layout::from_object(&bytes, Endian::Little).is_err());
    }

    #[test]
    fn two_disagreeing_reports_are_an_error_and_two_equal_ones_are_not() {
        let mut twice = object_with(LP64, Endian::Little);
        twice.extend(object_with(LP64, Endian::Little));
        assert!(Layout::from_object(&twice, Endian::Little).is_ok());
        let mut different = object_with(LP64, Endian::Little);
        different.extend(object_with([12, 4, 0, 4, 8, 4, 4, 4, 1, 4], Endian::Little));
        assert!(Layout::from_object(&different, Endian::Little).is_err());
    }

    #[test]
    fn differences_name_each_field_with_both_values() {
        let rust = Layout::from_values(LP64);
        let swapped = Layout::from_values([24, 8, 8, 0, 16, 8, 8, 8, 1, 8]);
        assert_eq!(
            swapped.differences(&rust, "C"),
            ["offsetof dst: Rust 0, C 8", "offsetof src: Rust 8, C 0"]
        );
        assert!(rust.differences(&rust, "C").is_empty());
    }

    #[test]
    fn consumer_output_line_is_read() {
        let output = "layout size=12 align=4 dst=0 src=4 nbytes=8 dst_size=4 src_size=4 \
                      nbytes_size=4 abi=1 pointer=4\ncontract ok\n";
        let layout = Layout::from_consumer_output(output).unwrap();
        assert_eq!(layout.values(), [12, 4, 0, 4, 8, 4, 4, 4, 1, 4]);
        assert_eq!(layout.to_string(), "12/4/0,4,8/4,4,4");
        assert!(Layout::from_consumer_output("contract ok").is_err());
        assert!(Layout::from_consumer_output("layout size=x").is_err());
        let without_sizes = "layout size=12 align=4 dst=0 src=4 nbytes=8 abi=1 pointer=4\n";
        let error = Layout::from_consumer_output(without_sizes).unwrap_err();
        assert!(error.contains("`dst_size=` missing"), "{error}");
    }

    #[test]
    fn a_narrow_field_is_a_difference_and_a_contract_violation() {
        // A header with `uint32_t nbytes` on a 64-bit target: size and offsets unchanged.
        let rust = Layout::from_values(LP64);
        let narrow = Layout::from_values([24, 8, 0, 8, 16, 8, 8, 4, 1, 8]);
        assert_eq!(
            narrow.differences(&rust, "C"),
            ["sizeof nbytes: Rust 8, C 4"]
        );
        assert_eq!(
            narrow.contract_violations(64),
            ["sizeof nbytes is 4, the contract says 8"]
        );
    }
}
