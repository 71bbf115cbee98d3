//! The committed headers against the Rust source, function by function:
//! each `extern "C" fn` here has a prototype in the header with the same
//! parameter and return types, and each prototype a function. The types
//! are compared in one spelling: C's turned into Rust's through a short
//! table (`int`, `int32_t` and `hostcopy_status` are `i32`, `size_t` is
//! `usize`, `T *` is `*mut T`, `const T *` is `*const T`, `void` behind a
//! pointer is `c_void`). The structures' layouts are asserted beside them
//! (same numbers as the header's own assertions); `ci.sh` compares the
//! library's exports with the headers.

use std::collections::BTreeMap;

/// A function: its parameters' types and its return type, spelled the
/// Rust way.
type Signatures = BTreeMap<String, (Vec<String>, String)>;

const HEADER: &str = include_str!("../include/hostcopy_stager.h");
const SIM_HEADER: &str = include_str!("../tests/hostcopy_sim.h");
const SOURCES: [&str; 4] = [
    include_str!("status.rs"),
    include_str!("stager.rs"),
    include_str!("memory.rs"),
    include_str!("transfer.rs"),
];
const SIM_SOURCE: &str = include_str!("sim.rs");

/// The header's prototypes (not its `static inline` helpers).
fn c_prototypes(header: &str) -> Signatures {
    let mut text = String::new();
    let mut rest = header;
    // Comments out.
    while let Some(start) = rest.find("/*") {
        text += &rest[..start];
        rest = &rest[start + 2..];
        rest = &rest[rest.find("*/").expect("a closed comment") + 2..];
    }
    text += rest;
    // Preprocessor lines out, continued ones included.
    let mut kept = String::new();
    let mut continued = false;
    for line in text.lines() {
        let directive = continued || line.trim_start().starts_with('#');
        continued = directive && line.trim_end().ends_with('\\');
        if !directive {
            kept += line;
            kept.push(' ');
        }
    }
    let mut prototypes = Signatures::new();
    for statement in kept.split([';', '{', '}']) {
        let statement = statement.split_whitespace().collect::<Vec<_>>().join(" ");
        // `static inline` helpers, typedefs, and the statements of the
        // helpers' bodies (assignments) are no prototypes.
        if statement.starts_with("static")
            || statement.starts_with("typedef")
            || statement.contains('=')
        {
            continue;
        }
        let Some(open) = statement.find('(') else {
            continue;
        };
        let head = &statement[..open];
        let Some(name_at) = head.rfind([' ', '*']) else {
            continue;
        };
        let name = head[name_at + 1..].trim();
        if !name.starts_with("hostcopy_") {
            continue;
        }
        let ret = c_type(&head[..=name_at]);
        let inner = &statement[open + 1..statement.rfind(')').expect("a closed parameter list")];
        let params = match inner.trim() {
            "void" => Vec::new(),
            inner => split_top(inner).iter().map(|p| c_param(p)).collect(),
        };
        prototypes.insert(name.to_owned(), (params, ret));
    }
    prototypes
}

/// One C parameter's type, its name dropped.
fn c_param(param: &str) -> String {
    let param = param.trim();
    // A function pointer: `RET (*name)(PARAMS)`.
    if let Some(star) = param.find("(*") {
        let ret = c_type(&param[..star]);
        let args = &param[param.rfind('(').unwrap() + 1..param.rfind(')').unwrap()];
        let args: Vec<String> = split_top(args).iter().map(|a| c_param(a)).collect();
        let ret = if ret == "()" {
            String::new()
        } else {
            format!("->{ret}")
        };
        return format!("Option<unsafe extern \"C\" fn({}){ret}>", args.join(","));
    }
    let name_at = param.rfind([' ', '*']).expect("a named parameter");
    c_type(&param[..=name_at])
}

/// A C type (`const char *`, `hostcopy_stager **`, `size_t`) the Rust way.
fn c_type(c: &str) -> String {
    let c = c.trim();
    let stars = c.matches('*').count();
    let base = c.trim_end_matches(['*', ' ']);
    let (constant, base) = match base.strip_prefix("const ") {
        Some(base) => (true, base.trim()),
        None => (false, base),
    };
    let base = match base {
        "int" | "int32_t" | "hostcopy_status" => "i32",
        "uint32_t" => "u32",
        "uint64_t" => "u64",
        "size_t" => "usize",
        "double" => "f64",
        "char" => "c_char",
        "void" if stars > 0 => "c_void",
        "void" => "()",
        other => other,
    };
    let mut rust = base.to_owned();
    for level in 0..stars {
        // `const` binds to the pointee: the innermost pointer.
        let kind = if level == 0 && constant {
            "*const "
        } else {
            "*mut "
        };
        rust = format!("{kind}{rust}");
    }
    rust
}

/// Splits at the commas outside brackets.
fn split_top(list: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' if !list[..i].ends_with('-') => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !list[start..].trim().is_empty() {
        parts.push(&list[start..]);
    }
    parts
}

/// The `extern "C" fn`s of Rust source files.
fn rust_functions(sources: &[&str]) -> Signatures {
    let mut functions = Signatures::new();
    for source in sources {
        for part in source.split("extern \"C\" fn ").skip(1) {
            let open = part.find('(').expect("a parameter list");
            let name = part[..open].trim().to_owned();
            let mut depth = 0;
            let close = part
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    c == ')' && depth == 0
                })
                .expect("a closed parameter list")
                .0;
            let params = split_top(&part[open + 1..close])
                .iter()
                .map(|p| squeeze(&p[p.find(':').expect("a typed parameter") + 1..]))
                .collect();
            let after = &part[close + 1..part.find('{').expect("a body")];
            let ret = after
                .trim()
                .strip_prefix("->")
                .map_or("()".to_owned(), squeeze);
            let ret = if ret == "hostcopy_status" {
                "i32".to_owned()
            } else {
                ret
            };
            functions.insert(name, (params, ret));
        }
    }
    functions
}

/// Whitespace out, but where it separates words (`*mut T`, `unsafe extern`).
fn squeeze(rust: &str) -> String {
    let words: Vec<&str> = rust.split_whitespace().collect();
    let mut out = String::new();
    for (i, word) in words.iter().enumerate() {
        let previous = if i > 0 { words[i - 1] } else { "" };
        let glued = previous.ends_with(['(', ',', '<']) || word.starts_with([')', ',', '>', '(']);
        if i > 0 && !glued {
            out.push(' ');
        }
        out += word;
    }
    out.replace("hostcopy_status", "i32")
}

fn compare(header: &Signatures, rust: &Signatures) -> Vec<String> {
    let mut differences = Vec::new();
    for (name, signature) in header {
        match rust.get(name) {
            None => differences.push(format!("{name}: declared, not defined in Rust")),
            Some(defined) if defined != signature => {
                differences.push(format!("{name}: header {signature:?}, Rust {defined:?}"))
            }
            Some(_) => {}
        }
    }
    for name in rust.keys().filter(|name| !header.contains_key(*name)) {
        differences.push(format!("{name}: defined in Rust, not declared"));
    }
    differences
}

#[test]
fn hostcopy_stager_h_declares_every_function_with_the_rust_types() {
    let header = c_prototypes(HEADER);
    assert!(header.len() >= 20, "{header:#?}");
    let differences = compare(&header, &rust_functions(&SOURCES));
    assert!(differences.is_empty(), "{differences:#?}");
}

#[test]
fn hostcopy_sim_h_declares_the_simulator_hooks_with_the_rust_types() {
    let differences = compare(&c_prototypes(SIM_HEADER), &rust_functions(&[SIM_SOURCE]));
    assert!(differences.is_empty(), "{differences:#?}");
}

/// The check fails where a type, a parameter or a function differs.
#[test]
fn the_check_finds_a_changed_type_a_dropped_parameter_and_a_missing_function() {
    let rust = rust_functions(&SOURCES);
    let broken = [
        HEADER.replace(
            "hostcopy_status hostcopy_stager_new(int device,",
            "hostcopy_status hostcopy_stager_new(size_t device,",
        ),
        HEADER.replace(
            "hostcopy_status hostcopy_transfer_query(hostcopy_transfer *transfer, int *finished);",
            "hostcopy_status hostcopy_transfer_query(hostcopy_transfer *transfer);",
        ),
        HEADER.replace("void hostcopy_stager_free(hostcopy_stager *stager);", ""),
        HEADER.replace(
            "const char *hostcopy_status_name(hostcopy_status status);",
            "char *hostcopy_status_name(hostcopy_status status);",
        ),
    ];
    for (i, header) in broken.iter().enumerate() {
        assert_ne!(header, HEADER, "variant {i} changed nothing");
        assert!(
            !compare(&c_prototypes(header), &rust).is_empty(),
            "variant {i} passed"
        );
    }
}
