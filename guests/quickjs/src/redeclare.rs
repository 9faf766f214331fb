//! Makes a cell's top-level `let`, `const` and `class` declarations redeclarable by
//! a later cell, as a notebook's kernel allows: each becomes a `var` binding of the
//! global object (`class C {}` becomes `var C = class C {};`). Everything below the
//! top level, and every other token, is left byte for byte, so error positions
//! stay on the same line.
//!
//! What this gives up, documented: a top-level `const` can be assigned again, and a
//! top-level `let` is visible before its declaration (as `undefined`).

/// What the scanner is inside.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Nest {
    /// `(`, `[` or `{` that is plain code.
    Bracket,
    /// The `${` of a template literal: its `}` goes back into the template.
    Interpolation,
    /// The body of a rewritten top-level class: its `}` ends the statement.
    ClassBody,
}

/// The last significant token, for telling a regex from a division and a statement
/// start from the middle of an expression.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// Nothing yet, or `;`, or a `}` that closed a block: a statement may start.
    StatementStart,
    /// A value (identifier, number, string, `)` or `]`): `/` divides.
    Value,
    /// An operator or an opening bracket: `/` starts a regex.
    Operator,
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || c == '$'
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Rewrites `code` (see the module's doc). Code the scanner cannot follow (an
/// unterminated string, say) is returned with the declarations found so far
/// rewritten; QuickJS reports the syntax error as it would have.
pub fn redeclarable(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len() + 16);
    let mut nest: Vec<Nest> = Vec::new();
    let mut prev = Prev::StatementStart;
    let mut newline_since_prev = false;
    // A rewritten class waits for its body's `{` at the top level.
    let mut class_pending = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // Whitespace and comments.
        if c == '\n' {
            newline_since_prev = true;
            out.push(c);
            i += 1;
            continue;
        }
        if c.is_whitespace() {
            out.push(c);
            i += 1;
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(chars[i]);
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            out.push_str("/*");
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                if chars[i] == '\n' {
                    newline_since_prev = true;
                }
                out.push(chars[i]);
                i += 1;
            }
            if i < chars.len() {
                out.push_str("*/");
                i += 2;
            }
            continue;
        }
        let top = nest.is_empty();
        let at_statement = prev == Prev::StatementStart || (newline_since_prev && prev == Prev::Value);
        newline_since_prev = false;
        // Strings.
        if c == '"' || c == '\'' {
            out.push(c);
            i += 1;
            while i < chars.len() && chars[i] != c && chars[i] != '\n' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    out.push(chars[i]);
                    i += 1;
                }
                out.push(chars[i]);
                i += 1;
            }
            if i < chars.len() {
                out.push(chars[i]);
                i += 1;
            }
            prev = Prev::Value;
            continue;
        }
        // Template literals, and the `}` that goes back into one.
        if c == '`' || (c == '}' && nest.last() == Some(&Nest::Interpolation)) {
            if c == '}' {
                nest.pop();
            }
            out.push(c);
            i += 1;
            let mut opened = false;
            while i < chars.len() && chars[i] != '`' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    out.push(chars[i]);
                    i += 1;
                } else if chars[i] == '$' && chars.get(i + 1) == Some(&'{') {
                    out.push_str("${");
                    i += 2;
                    nest.push(Nest::Interpolation);
                    opened = true;
                    break;
                }
                out.push(chars[i]);
                i += 1;
            }
            if opened {
                prev = Prev::Operator;
                continue;
            }
            if i < chars.len() {
                out.push('`');
                i += 1;
            }
            prev = Prev::Value;
            continue;
        }
        // Regex literals, where a value cannot stand.
        if c == '/' && prev != Prev::Value {
            out.push(c);
            i += 1;
            let mut in_class = false;
            while i < chars.len() && chars[i] != '\n' && (in_class || chars[i] != '/') {
                match chars[i] {
                    '\\' if i + 1 < chars.len() => {
                        out.push(chars[i]);
                        i += 1;
                    }
                    '[' => in_class = true,
                    ']' => in_class = false,
                    _ => {}
                }
                out.push(chars[i]);
                i += 1;
            }
            if i < chars.len() && chars[i] == '/' {
                out.push('/');
                i += 1;
                while i < chars.len() && is_ident(chars[i]) {
                    out.push(chars[i]);
                    i += 1;
                }
            }
            prev = Prev::Value;
            continue;
        }
        // Identifiers and keywords.
        if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let next = chars.get(j).copied();
            let declares = top && at_statement && next.is_some_and(|n| is_ident_start(n) || n == '[' || n == '{');
            match word.as_str() {
                "let" if declares => out.push_str("var"),
                "const" if declares => out.push_str("var  "),
                "class" if top && at_statement && next.is_some_and(is_ident_start) => {
                    let name_end = (j..chars.len()).find(|&k| !is_ident(chars[k])).unwrap_or(chars.len());
                    let name: String = chars[j..name_end].iter().collect();
                    if name == "extends" {
                        out.push_str(&word);
                    } else {
                        out.push_str(&format!("var {name} = class"));
                        class_pending = true;
                    }
                }
                _ => out.push_str(&word),
            }
            prev = match word.as_str() {
                "return" | "typeof" | "instanceof" | "in" | "of" | "new" | "delete" | "void" | "throw" | "case"
                | "do" | "else" | "yield" | "await" => Prev::Operator,
                _ => Prev::Value,
            };
            continue;
        }
        if c.is_ascii_digit() {
            while i < chars.len() && (is_ident(chars[i]) || chars[i] == '.') {
                out.push(chars[i]);
                i += 1;
            }
            prev = Prev::Value;
            continue;
        }
        // Punctuation.
        out.push(c);
        i += 1;
        prev = match c {
            '(' | '[' => {
                nest.push(Nest::Bracket);
                Prev::Operator
            }
            '{' => {
                if top && class_pending {
                    class_pending = false;
                    nest.push(Nest::ClassBody);
                } else {
                    nest.push(Nest::Bracket);
                }
                Prev::StatementStart
            }
            ')' | ']' => {
                nest.pop();
                Prev::Value
            }
            '}' => match nest.pop() {
                Some(Nest::ClassBody) => {
                    out.push(';');
                    Prev::StatementStart
                }
                _ => Prev::StatementStart,
            },
            ';' => Prev::StatementStart,
            _ => Prev::Operator,
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redeclarable;

    #[test]
    fn top_level_declarations_become_globals() {
        assert_eq!(redeclarable("let base = 40"), "var base = 40");
        assert_eq!(redeclarable("const base = 41;"), "var   base = 41;");
        assert_eq!(redeclarable("const {a, b} = o; let [c] = d"), "var   {a, b} = o; var [c] = d");
        assert_eq!(redeclarable("class C { m() { return 1 } }\n(1)"), "var C = class C { m() { return 1 } };\n(1)");
        assert_eq!(redeclarable("class D extends C {}"), "var D = class D extends C {};");
        assert_eq!(redeclarable("x = 1\nlet y = 2"), "x = 1\nvar y = 2");
    }

    #[test]
    fn nothing_below_the_top_level_or_inside_literals_changes() {
        for code in [
            "for (let i = 0; i < 3; i++) {}",
            "function f() { let x = 1; const y = 2; class Z {} }",
            "{ let inner = 1 }",
            "'let a = 1'; \"const b\"",
            "`let ${ {let: 1}.let } const c`",
            "/let x/.test(s)",
            "// let commented\n/* const c = 1 */",
            "let = 5",
            "a = b / c; let",
            "x.let = 1; y.class",
        ] {
            let out = redeclarable(code);
            assert!(!out.contains("var"), "{code:?} became {out:?}");
        }
        assert_eq!(redeclarable("s = `${1}`; let z = 3"), "s = `${1}`; var z = 3");
        assert_eq!(redeclarable("r = /}/g; let q = 1"), "r = /}/g; var q = 1");
    }
}
