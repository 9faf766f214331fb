//! HTML text for the pages the CLI writes (`advise`, `sim report`).

/// `s` escaped for HTML text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn every_special_character_is_escaped() {
        assert_eq!(esc("</b> & \"x\" 'y' ü"), "&lt;/b&gt; &amp; &quot;x&quot; &#39;y&#39; ü");
    }
}
