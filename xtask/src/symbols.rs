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
    pub(crate) class: char,
    /// The ELF symbol type (`FUNC`, `OBJECT`, ...); empty for COFF and wasm.
    pub(crate) elf_type: String,
}

/// The hostcopy names among the undefined symbols that `llvm-nm -u -j` listed.
pub(crate) fn hostcopy_references(nm_output: &str) -> Vec<String> {
    let mut names: Vec<String> = nm_output
        .lines()
        .map(str::trim)
        .filter(|name| name.contains("hostcopy_"))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Parses `llvm-nm --format=sysv` over an archive: `name|value|class|type|size|line|section`.
pub(crate) fn parse_sysv(nm_output: &str) -> Vec<DefinedSymbol> {
    nm_output
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('|').map(str::trim).collect();
            let [name, _value, class, elf_type, ..] = fields.as_slice() else {
                return None;
            };
            let class = class.chars().next()?;
            if *name == "Name" || name.is_empty() {
                return None;
            }
            Some(DefinedSymbol {
                name: (*name).to_owned(),
                class,
                elf_type: (*elf_type).to_owned(),
            })
        })
        .collect()
}

/// Checks that `wanted` is defined as a global function; the error says what is there instead.
pub(crate) fn check_defined(
    defined: &[DefinedSymbol],
    wanted: &str,
    format: Format,
) -> Result<(), String> {
    let matches: Vec<&DefinedSymbol> = defined.iter().filter(|s| s.name == wanted).collect();
    if matches.is_empty() {
        // The library's C names, leaving out Rust's mangled ones (which
        // contain the crate name `hostcopy_core`).
        let mut similar: Vec<&str> = defined
            .iter()
            .filter(|s| s.name.contains("hostcopy_") && !s.name.contains("hostcopy_core"))
            .map(|s| s.name.as_str())
            .collect();
        similar.sort_unstable();
        similar.dedup();
        let similar = if similar.is_empty() {
            "no hostcopy_ names".to_owned()
        } else {
            similar.join(", ")
        };
        return Err(format!(
            "a C caller links against `{wanted}`, which libhostcopy.a does not define (it defines: {similar})"
        ));
    }
    for symbol in matches {
        if symbol.class != 'T' {
            return Err(format!(
                "`{wanted}` has nm class `{}`, not `T` (a global symbol in code)",
                symbol.class
            ));
        }
        if format == Format::Elf && symbol.elf_type != "FUNC" {
            return Err(format!(
                "`{wanted}` has ELF type `{}`, not FUNC",
                symbol.elf_type
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ELF_ARCHIVE: &str = "\
hostcopy_core-1.o:
Symbols from hostcopy_core-1.o:
_ZN13hostcopy_core7host_fn8REJECTED17h2d2ec8c64c5b82c5E|0000000000000000|   b  |            OBJECT|0000000000000008|     |.bss.x
hostcopy_fn         |0000000000000000|   T  |              FUNC|0000000000000102|     |.text.hostcopy_fn
hostcopy_rejected   |0000000000000000|   T  |              FUNC|0000000000000038|     |.text.hostcopy_rejected
hostcopy_data       |0000000000000000|   D  |            OBJECT|0000000000000008|     |.data
";

    const COFF_ARCHIVE: &str = "\
_hostcopy_fn@4      |000000c0|   T  |                  |00000000|     |
_hostcopy_rejected  |00000180|   T  |                  |00000000|     |
";

    #[test]
    fn sysv_listing_is_parsed_with_class_and_elf_type() {
        let symbols = parse_sysv(ELF_ARCHIVE);
        assert_eq!(symbols.len(), 4);
        assert_eq!(
            symbols[1],
            DefinedSymbol {
                name: "hostcopy_fn".into(),
                class: 'T',
                elf_type: "FUNC".into()
            }
        );
        assert_eq!(parse_sysv(COFF_ARCHIVE)[0].elf_type, "");
    }

    #[test]
    fn global_functions_pass() {
        let elf = parse_sysv(ELF_ARCHIVE);
        assert_eq!(check_defined(&elf, "hostcopy_fn", Format::Elf), Ok(()));
        let coff = parse_sysv(COFF_ARCHIVE);
        assert_eq!(check_defined(&coff, "_hostcopy_fn@4", Format::Coff), Ok(()));
    }

    #[test]
    fn undecorated_cdecl_name_is_reported_with_what_is_there() {
        let coff = parse_sysv(COFF_ARCHIVE);
        let error = check_defined(&coff, "_hostcopy_fn", Format::Coff).unwrap_err();
        assert!(error.contains("`_hostcopy_fn`"), "{error}");
        assert!(
            error.ends_with("(it defines: _hostcopy_fn@4, _hostcopy_rejected)"),
            "{error}"
        );
    }

    #[test]
    fn data_symbols_are_not_functions() {
        let elf = parse_sysv(ELF_ARCHIVE);
        assert!(check_defined(&elf, "hostcopy_data", Format::Elf).is_err());
    }

    #[test]
    fn references_are_the_hostcopy_names_only() {
        let listing = "__stack_pointer\nhostcopy_rejected\n_hostcopy_fn@4\n";
        assert_eq!(
            hostcopy_references(listing),
            ["_hostcopy_fn@4", "hostcopy_rejected"]
        );
    }
}
