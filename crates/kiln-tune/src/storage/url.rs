//! Storage URLs without their secrets: every message, log line, table and TensorBoard summary
//! that names a storage shows it through [`redact`], and database error texts go through
//! [`scrub`].

/// `url` with its password replaced by `***`: the `user:password@` part of the authority
/// (`postgresql://kiln:secret@db/tune` -> `postgresql://kiln:***@db/tune`) and any
/// `password=` query parameter, or the `password=` keyword of a libpq keyword/value string
/// (`host=db password=secret` -> `host=db password=***`). Text without a password is
/// returned unchanged.
pub fn redact(url: &str) -> String {
    if !url.contains("://") && url.contains('=') {
        return url
            .split(' ')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.trim().eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ");
    }
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let start = scheme_end + 3;
        let rest = &out[start..];
        let end = rest.find(['/', '?', '#']).map_or(out.len(), |i| start + i);
        let authority = &out[start..end];
        if let Some(at) = authority.rfind('@') {
            let userinfo = &authority[..at];
            if let Some(colon) = userinfo.find(':') {
                let host = &authority[at..];
                let user = &userinfo[..colon];
                out = format!("{}{user}:***{host}{}", &out[..start], &out[end..]);
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// The password in `url` (the userinfo's, else a `password=` query parameter), if any.
fn password(url: &str) -> Option<String> {
    let from_userinfo = url.find("://").and_then(|i| {
        let rest = &url[i + 3..];
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        let at = authority.rfind('@')?;
        let (_, pass) = authority[..at].split_once(':')?;
        Some(pass.to_string()).filter(|p| !p.is_empty())
    });
    let from_query = url.split_once('?').and_then(|(_, q)| {
        q.split('&')
            .find_map(|kv| {
                kv.split_once('=')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("password"))
            })
            .map(|(_, v)| v.to_string())
    });
    from_userinfo.or(from_query)
}

/// `text` (an error message from the database client) with the password of `url` replaced
/// by `***` wherever it appears, raw or percent-decoded, and any copy of `url` redacted.
pub fn scrub(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact(url));
    if let Some(p) = password(url) {
        let decoded = percent_decode(&p);
        for secret in [p, decoded] {
            if secret.len() >= 2 {
                out = out.replace(&secret, "***");
            }
        }
    }
    out
}

/// `%XX` escapes decoded (as in URL userinfo).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_and_the_rest_kept() {
        assert_eq!(
            redact("postgresql://kiln:s3cr%40t@db.example:5432/tune?sslmode=disable"),
            "postgresql://kiln:***@db.example:5432/tune?sslmode=disable"
        );
        assert_eq!(
            redact("postgres://kiln@db/tune?password=hunter2&sslmode=require"),
            "postgres://kiln@db/tune?password=***&sslmode=require"
        );
        assert_eq!(redact("postgresql://db/tune"), "postgresql://db/tune");
        assert_eq!(redact("runs/tune/study.db"), "runs/tune/study.db");
        assert_eq!(
            redact("host=127.0.0.1 port=1 password=kvsecret"),
            "host=127.0.0.1 port=1 password=***"
        );
        // A password holding '@' or '/' written percent-encoded stays hidden.
        assert!(!redact("postgresql://u:a%2Fb%40c@h/d").contains("a%2Fb"));
    }

    #[test]
    fn scrub_hides_the_password_raw_and_decoded() {
        let url = "postgresql://kiln:s3cr%40t@db/tune";
        let text = format!("cannot connect to {url}: password s3cr@t rejected (s3cr%40t)");
        let clean = scrub(&text, url);
        assert!(!clean.contains("s3cr"), "{clean}");
        assert!(clean.contains("postgresql://kiln:***@db/tune"), "{clean}");
        let url = "postgres://kiln@db/tune?password=hunter2";
        assert!(!scrub("auth failed for hunter2", url).contains("hunter2"));
    }
}
