//! The symbol check: the names a C caller links against are what the static
//! library defines.
//!
//! A C caller's names come from compiling `abi-tests/c/symbol_probe.c` for the
//! target and listing its undefined symbols: the compiler applies the
//! target's decoration (on i686 Windows a `__stdcall` function is
//! `_name@<bytes of arguments>`, a cdecl one `_name`). Each must then be
//! defined by `libhostcopy.a` as a global function. Both listings come
//! from llvm-nm, which reads ELF, COFF and wasm alike.

use crate::targets::Format;

/// One symbol that an archive member defines, from `llvm-nm --format=sysv`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DefinedSymbol {
    pub(crate) name: String,
    /// nm's class letter: `T` is a global symbol in a text (code) section.
    class: char,
    /// The ELF symbol type (`FUNC`, `OBJECT`, ...); empty for COFF and wasm.
    elf_type: String,
}

/// The hostcopy names among the undefined symbols that `llvm-nm -u -j` listed.
pub(crate) fn hostcopy_references(nm_output: &str) -> Vec<String> {
    let mut names: Vec<String> =
        nm_output.lines().map(str::trim).filter(|name| name.contains("hostcopy_")).map(str::to_owned).collect();
    names.sort();
    names.dedup();
    names
}

/// Parses `llvm-nm --format=sysv` over an archive: `name|value|class|type|size|line|section`.
pub(crate) fn parse_sysv(nm_output: &str) -> Vec<DefinedSymbol> {
    let symbol = |line: &str| {
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        let [name, _value, class, elf_type, ..] = fields.as_slice() else {
            return None;
        };
        let class = class.chars().next().filter(|_| *name != "Name" && !name.is_empty())?;
        Some(DefinedSymbol { name: (*name).to_owned(), class, elf_type: (*elf_type).to_owned() })
    };
    nm_output.lines().filter_map(symbol).collect()
}

/// Checks that `wanted` is defined as a global function; the error says what is there instead.
pub(crate) fn check_defined(defined: &[DefinedSymbol], wanted: &str, format: Format) -> Result<(), String> {
    let matches: Vec<&DefinedSymbol> = defined.iter().filter(|s| s.name == wanted).collect();
    if matches.is_empty() {
        // The library's C names: Rust's mangled ones contain `hostcopy_core`.
        let mut similar: Vec<&str> = defined
            .iter()
            .map(|s| s.name.as_str())
            .filter(|name| name.contains("hostcopy_") && !name.contains("hostcopy_core"))
            .collect();
        similar.sort_unstable();
        similar.dedup();
        let what = format!("a C caller links against `{wanted}`, which the static library does not define");
        return Err(format!("{what} (it defines: {})", similar.join(", ")));
    }
    for symbol in matches {
        if symbol.class != 'T' || (format == Format::Elf && symbol.elf_type != "FUNC") {
            let kind = format!("nm class `{}`, ELF type `{}`", symbol.class, symbol.elf_type);
            return Err(format!("`{wanted}` is not a global function in code ({kind})"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ELF_ARCHIVE: &str = "\
hostcopy-1.o:
hostcopy_fn         |0000000000000000|   T  |              FUNC|0000000000000102|     |.text.hostcopy_fn
hostcopy_rejected   |0000000000000000|   T  |              FUNC|0000000000000038|     |.text.hostcopy_rejected
hostcopy_data       |0000000000000000|   D  |            OBJECT|0000000000000008|     |.data
";

    const COFF_ARCHIVE: &str = "\
_hostcopy_fn@4      |000000c0|   T  |                  |00000000|     |
_hostcopy_rejected  |00000180|   T  |                  |00000000|     |
";

    #[test]
    fn global_functions_pass_and_data_does_not() {
        let elf = parse_sysv(ELF_ARCHIVE);
        assert_eq!(elf.len(), 3);
        assert_eq!(check_defined(&elf, "hostcopy_fn", Format::Elf), Ok(()));
        assert!(check_defined(&elf, "hostcopy_data", Format::Elf).is_err());
        assert_eq!(check_defined(&parse_sysv(COFF_ARCHIVE), "_hostcopy_fn@4", Format::Coff), Ok(()));
    }

    #[test]
    fn undecorated_cdecl_name_is_reported_with_what_is_there() {
        let error = check_defined(&parse_sysv(COFF_ARCHIVE), "_hostcopy_fn", Format::Coff).unwrap_err();
        assert!(error.ends_with("(it defines: _hostcopy_fn@4, _hostcopy_rejected)"), "{error}");
        let listing = "__stack_pointer\nhostcopy_rejected\n_hostcopy_fn@4\n";
        assert_eq!(hostcopy_references(listing), ["_hostcopy_fn@4", "hostcopy_rejected"]);
    }
}
