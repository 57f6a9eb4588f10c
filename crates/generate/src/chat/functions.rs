//! What Hugging Face `transformers` gives chat templates beside Jinja: the functions
//! `raise_exception` and `strftime_now`, and the `{% generation %}` block (its
//! `AssistantTracker` extension marks the assistant's text for training masks; rendering,
//! it is a block that writes its body, here an `{% if true %}`).

use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::{Error as JinjaError, ErrorKind, Value};

/// `source` with every `{% generation %}` and `{% endgeneration %}` tag (any white-space
/// control marks kept) as `{% if true %}` and `{% endif %}`, which minijinja compiles.
pub(super) fn without_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{%") {
        let Some(len) = rest[open..].find("%}") else {
            break;
        };
        let tag = &rest[open + 2..open + len];
        let inner = tag.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        let word = match inner {
            "generation" => "if true",
            "endgeneration" => "endif",
            _ => {
                out.push_str(&rest[..open + len + 2]);
                rest = &rest[open + len + 2..];
                continue;
            }
        };
        let lead = if tag.starts_with(['-', '+']) {
            &tag[..1]
        } else {
            ""
        };
        let trail = if tag.ends_with(['-', '+']) {
            &tag[tag.len() - 1..]
        } else {
            ""
        };
        out.push_str(&rest[..open]);
        out.push_str(&format!("{{%{lead} {word} {trail}%}}"));
        rest = &rest[open + len + 2..];
    }
    out.push_str(rest);
    out
}

/// `raise_exception(message)`: the render fails with `message`.
pub(super) fn raise_exception(message: String) -> Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current UTC time; supports `%Y %m %d %e %b %B %a %A %H %M %S %y
/// %j %%` (enough for the date lines of Llama 3 templates).
pub(super) fn strftime_now(format: String) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    strftime(&format, secs)
}

fn strftime(format: &str, unix_secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = (unix_secs / 86_400) as i64;
    let tod = unix_secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let cumulative = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cumulative[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let month_name = MONTHS[(month - 1) as usize];
    let weekday = DAYS[days.rem_euclid(7) as usize];

    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year % 100)),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:2}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('b') => out.push_str(&month_name[..3]),
            Some('B') => out.push_str(month_name),
            Some('a') => out.push_str(&weekday[..3]),
            Some('A') => out.push_str(weekday),
            Some('H') => out.push_str(&format!("{:02}", tod / 3600)),
            Some('M') => out.push_str(&format!("{:02}", tod / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", tod % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_blocks_become_plain_blocks() {
        assert_eq!(
            without_generation_tags(
                "a{% generation %}b{%- endgeneration -%} c {%+generation%}{% if x %}{% endif %}"
            ),
            "a{% if true %}b{%- endif -%} c {%+ if true %}{% if x %}{% endif %}"
        );
        assert_eq!(without_generation_tags("{{ x }} {% y"), "{{ x }} {% y");
    }

    #[test]
    fn strftime_formats_dates() {
        // 2024-07-26 13:05:09 UTC, a Friday.
        let t = 1_722_000_000 - 1_722_000_000 % 86_400 + 13 * 3600 + 5 * 60 + 9;
        assert_eq!(strftime("%d %b %Y", t), "26 Jul 2024");
        assert_eq!(
            strftime("%A %B %e %H:%M:%S %j %%", t),
            "Friday July 26 13:05:09 208 %"
        );
        assert_eq!(strftime("%Y-%m-%d", 0), "1970-01-01");
        assert_eq!(strftime("%Y-%m-%d", 951_782_400), "2000-02-29");
    }
}
