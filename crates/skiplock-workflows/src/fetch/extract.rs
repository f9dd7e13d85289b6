//! HTML → title, headings, visible body text and links, with the `scraper` HTML parser
//! (html5ever), never regexes. Pure.

use scraper::{ElementRef, Html, Node, Selector};
use url::Url;

use super::normalize::resolve_link;

/// What a page contributes to the guestbook.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extracted {
    /// `<title>`, whitespace collapsed.
    pub title: String,
    /// `h1`–`h6` texts in document order, one per line.
    pub headings: String,
    /// The visible text of `<body>` (no script, style, template, noscript), whitespace
    /// collapsed, one line per block of text.
    pub body: String,
    /// Absolute http(s) links (`a[href]`), fragment dropped, deduplicated, in order.
    pub links: Vec<Url>,
}

const HIDDEN: &[&str] = &[
    "script", "style", "template", "noscript", "head", "svg", "iframe",
];

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn text_of(e: ElementRef<'_>) -> String {
    collapse(&e.text().collect::<Vec<_>>().join(" "))
}

const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "td",
    "th",
    "tr",
    "ul",
];

fn visible_text(e: ElementRef<'_>, out: &mut String) {
    for child in e.children() {
        match child.value() {
            Node::Text(t) => {
                out.push(' ');
                out.push_str(t);
            }
            Node::Element(el) if HIDDEN.contains(&el.name()) => {}
            Node::Element(el) => {
                let block = BLOCKS.contains(&el.name());
                if block {
                    out.push('\n');
                }
                if let Some(c) = ElementRef::wrap(child) {
                    visible_text(c, out);
                }
                if block {
                    out.push('\n');
                }
            }
            _ => {}
        }
    }
}

fn sel(s: &str) -> Selector {
    Selector::parse(s).expect("static selector")
}

/// Extracts a page fetched from `base` (links resolve against `<base href>` if present).
pub fn extract(html: &str, base: &Url) -> Extracted {
    let doc = Html::parse_document(html);
    let title = doc
        .select(&sel("title"))
        .next()
        .map(text_of)
        .unwrap_or_default();
    let headings = doc
        .select(&sel("h1, h2, h3, h4, h5, h6"))
        .map(text_of)
        .filter(|h| !h.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    let mut raw = String::new();
    if let Some(body) = doc.select(&sel("body")).next() {
        visible_text(body, &mut raw);
    }
    let body = raw
        .lines()
        .map(collapse)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    let base = doc
        .select(&sel("base[href]"))
        .next()
        .and_then(|b| b.value().attr("href"))
        .and_then(|h| base.join(h).ok())
        .unwrap_or_else(|| base.clone());
    let mut links: Vec<Url> = Vec::new();
    for a in doc.select(&sel("a[href]")) {
        if let Some(u) = a.value().attr("href").and_then(|h| resolve_link(&base, h))
            && !links.contains(&u)
        {
            links.push(u);
        }
    }
    Extracted {
        title,
        headings,
        body,
        links,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_title_headings_visible_text_and_links() {
        let html = r#"<!doctype html><html><head><title> Hello
            World </title><style>p{color:red}</style></head>
            <body><h1>Main</h1><p>First <b>bold</b> para.</p>
            <script>var hidden = 1;</script><noscript>no js</noscript>
            <h2> Sub  heading </h2><a href="/b#top">B</a> <a href="c">C</a> <a href="/b">again</a>
            <a href="mailto:x@example.com">mail</a></body></html>"#;
        let base = Url::parse("http://example.com/dir/a").unwrap();
        let e = extract(html, &base);
        assert_eq!(e.title, "Hello World");
        assert_eq!(e.headings, "Main\nSub heading");
        assert!(e.body.contains("Main\nFirst bold para.\n"), "{}", e.body);
        assert!(!e.body.contains("hidden"));
        assert!(!e.body.contains("color:red"));
        assert!(!e.body.contains("no js"));
        let links: Vec<&str> = e.links.iter().map(Url::as_str).collect();
        assert_eq!(links, ["http://example.com/b", "http://example.com/dir/c"]);
    }

    #[test]
    fn a_link_over_the_url_cap_is_skipped_and_the_others_kept() {
        let long = format!("/{}", "x".repeat(3000));
        let html = format!(r#"<a href="/a">A</a> <a href="{long}">long</a> <a href="/b">B</a>"#);
        let e = extract(&html, &Url::parse("http://example.com/").unwrap());
        let links: Vec<&str> = e.links.iter().map(Url::as_str).collect();
        assert_eq!(links, ["http://example.com/a", "http://example.com/b"]);
    }

    #[test]
    fn broken_html_still_extracts() {
        let e = extract(
            "<title>x</title><p>unclosed <div>text",
            &Url::parse("http://a.com/").unwrap(),
        );
        assert_eq!(e.title, "x");
        assert_eq!(e.body, "unclosed\ntext");
    }
}
