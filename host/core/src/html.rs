//! HTML text for the pages plimsoll writes (`advise`, `sim report`, the MCP
//! server's owner pages): anything a caller, a plugin or a client chose is
//! escaped before it reaches a page.

/// `s` escaped for HTML text and double- or single-quoted attribute values.
pub fn escape(s: &str) -> String {
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
    use super::escape;

    #[test]
    fn every_special_character_is_escaped() {
        assert_eq!(escape("</b> & \"x\" 'y' ü"), "&lt;/b&gt; &amp; &quot;x&quot; &#39;y&#39; ü");
    }
}
