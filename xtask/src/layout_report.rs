//! Reading the record's layout out of what each side built for a target.
//!
//! `abi-tests/src/layout.rs` (Rust) and `abi-tests/c/layout_report.c` (C)
//! each put a 16-byte marker followed by ten 32-bit values into an object
//! file. Scanning the bytes finds them in ELF, COFF and wasm objects alike,
//! without linking or running anything built for the target; the values are
//! in the target's byte order. The C consumer prints the same ten values as
//! a text line (`layout size=24 align=8 ...`), which is read here too.

use std::fmt;

use crate::targets::Endian;

/// The marker before the values: `b"HOSTCOPY-LAYOUT\0"` on both sides.
const MAGIC: &[u8; 16] = b"HOSTCOPY-LAYOUT\0";

/// The facts both sides report about `struct hostcopy_args` / `HostCopyArgs`,
/// in report order (see [`NAMES`]). The field sizes matter: on a 64-bit target
/// a `uint32_t nbytes` keeps the struct's size (padding) and every offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    values: [u32; FIELDS],
}

const FIELDS: usize = 10;
/// How the table and the messages name each value, and the C consumer's key for it.
const NAMES: [(&str, &str); FIELDS] = [
    ("size", "size"),
    ("align", "align"),
    ("offsetof dst", "dst"),
    ("offsetof src", "src"),
    ("offsetof nbytes", "nbytes"),
    ("sizeof dst", "dst_size"),
    ("sizeof src", "src_size"),
    ("sizeof nbytes", "nbytes_size"),
    ("ABI version", "abi"),
    ("pointer size", "pointer"),
];

impl Layout {
    pub(crate) const fn from_values(values: [u32; FIELDS]) -> Self {
        Layout { values }
    }

    /// Finds the report in an object file. Exactly one distinct report must be
    /// there: two that disagree mean the scan found something else.
    pub(crate) fn from_object(bytes: &[u8], endian: Endian) -> Result<Self, String> {
        let mut found: Option<Layout> = None;
        let starts = bytes.windows(MAGIC.len()).enumerate().filter(|(_, w)| w == MAGIC);
        for (start, _) in starts {
            let words = bytes.get(start + MAGIC.len()..start + MAGIC.len() + 4 * FIELDS);
            let words = words.ok_or(format!("the layout report at byte {start} is cut off"))?;
            let mut values = [0u32; FIELDS];
            for (value, word) in values.iter_mut().zip(words.chunks_exact(4)) {
                let word: [u8; 4] = word.try_into().expect("chunks of four");
                *value = match endian {
                    Endian::Little => u32::from_le_bytes(word),
                    Endian::Big => u32::from_be_bytes(word),
                };
            }
            let layout = Layout::from_values(values);
            if found.is_some_and(|earlier| earlier != layout) {
                return Err(format!("two different layout reports in one object: {layout} and {found:?}"));
            }
            found = Some(layout);
        }
        found.ok_or_else(|| "no layout report (marker HOSTCOPY-LAYOUT) in the object".to_owned())
    }

    /// Reads the C consumer's `layout size=24 align=8 dst=0 ...` line.
    pub(crate) fn from_consumer_output(output: &str) -> Result<Self, String> {
        let line = output.lines().find_map(|line| line.strip_prefix("layout "));
        let line = line.ok_or("no `layout ...` line in the C consumer's output")?;
        let mut values = [0u32; FIELDS];
        for (value, (_, key)) in values.iter_mut().zip(NAMES) {
            let text = line.split_whitespace().find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='));
            let text = text.ok_or_else(|| format!("`{key}=` missing in `layout {line}`"))?;
            *value = text.parse().map_err(|_| format!("`{key}={text}` is not a number in `{line}`"))?;
        }
        Ok(Layout::from_values(values))
    }

    /// Every value where the two differ, with both: empty when they agree.
    pub(crate) fn differences(&self, rust: &Layout, this_side: &str) -> Vec<String> {
        self.differences_from(rust, "Rust", this_side)
    }

    /// [`differences`](Self::differences) with `other` named `other_side`.
    pub(crate) fn differences_from(&self, other: &Layout, other_side: &str, this_side: &str) -> Vec<String> {
        let pairs = NAMES.iter().zip(other.values.iter().zip(self.values));
        let differ = pairs.filter(|(_, (o, t))| **o != *t);
        differ.map(|((name, _), (o, t))| format!("{name}: {other_side} {o}, {this_side} {t}")).collect()
    }

    /// The values, in report order.
    pub(crate) fn values(&self) -> [u32; FIELDS] {
        self.values
    }

    /// Where the layout is not the contract's for a pointer width: three
    /// words in a row, each one word long, aligned to a word.
    pub(crate) fn contract_violations(&self, pointer_width: u32) -> Vec<String> {
        let word = pointer_width / 8;
        let abi = self.values[8];
        let expected = [3 * word, word, 0, word, 2 * word, word, word, word, abi, word];
        let pairs = NAMES.iter().zip(expected.iter().zip(self.values));
        let differ = pairs.filter(|(_, (e, v))| **e != *v);
        differ.map(|((name, _), (e, v))| format!("{name} is {v}, the contract says {e}")).collect()
    }
}

/// `size/align/offsetof dst,src,nbytes/sizeof dst,src,nbytes`, as in the table.
impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [size, align, dst, src, nbytes, dst_size, src_size, nbytes_size, ..] = self.values;
        write!(f, "{size}/{align}/{dst},{src},{nbytes}/{dst_size},{src_size},{nbytes_size}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LP64: [u32; FIELDS] = [24, 8, 0, 8, 16, 8, 8, 8, 1, 8];

    fn object_with(values: [u32; FIELDS], endian: Endian) -> Vec<u8> {
        let mut bytes = b"\x7fELF some header bytes".to_vec();
        bytes.extend_from_slice(MAGIC);
        for v in values {
            bytes.extend(if endian == Endian::Big { v.to_be_bytes() } else { v.to_le_bytes() });
        }
        bytes.extend_from_slice(b"trailing symbol table");
        bytes
    }

    #[test]
    fn report_is_decoded_in_the_targets_byte_order_and_checked() {
        for endian in [Endian::Little, Endian::Big] {
            let layout = Layout::from_object(&object_with(LP64, endian), endian).unwrap();
            assert_eq!(layout, Layout::from_values(LP64));
            assert!(layout.contract_violations(64).is_empty());
        }
        let wrong = Layout::from_object(&object_with(LP64, Endian::Big), Endian::Little).unwrap();
        assert!(!wrong.contract_violations(64).is_empty());
        assert!(Layout::from_object(b"just some bytes", Endian::Little).is_err());
        let cut = object_with(LP64, Endian::Little);
        assert!(Layout::from_object(&cut[..cut.len() - 40], Endian::Little).is_err());
        let mut different = object_with(LP64, Endian::Little);
        different.extend(object_with([12, 4, 0, 4, 8, 4, 4, 4, 1, 4], Endian::Little));
        assert!(Layout::from_object(&different, Endian::Little).is_err());
    }

    #[test]
    fn differences_name_each_value_with_both_sides() {
        let rust = Layout::from_values(LP64);
        let swapped = Layout::from_values([24, 8, 8, 0, 16, 8, 8, 8, 1, 8]);
        let expected = ["offsetof dst: Rust 0, C 8", "offsetof src: Rust 8, C 0"];
        assert_eq!(swapped.differences(&rust, "C"), expected);
        let narrow = Layout::from_values([24, 8, 0, 8, 16, 8, 8, 4, 1, 8]);
        assert_eq!(narrow.contract_violations(64), ["sizeof nbytes is 4, the contract says 8"]);
    }

    #[test]
    fn consumer_output_line_is_read() {
        let output = "layout size=12 align=4 dst=0 src=4 nbytes=8 dst_size=4 src_size=4 \
                      nbytes_size=4 abi=1 pointer=4\ncontract ok\n";
        let layout = Layout::from_consumer_output(output).unwrap();
        assert_eq!(layout.to_string(), "12/4/0,4,8/4,4,4");
        assert!(Layout::from_consumer_output("contract ok").is_err());
        assert!(Layout::from_consumer_output("layout size=x").is_err());
    }
}
