//! The chat module's tests.

use super::*;

const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

#[test]
fn chatml_renders_like_transformers() {
    let t = ChatTemplate::new(CHATML).unwrap();
    let text = t
        .render(&[ChatMessage::system("S"), ChatMessage::user("Hi")], true)
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    // Default system prompt when none is given; no generation prompt.
    let text = t.render(&[ChatMessage::user("Hi")], false).unwrap();
    assert!(text.starts_with("<|im_start|>system\nYou are a helpful"));
    assert!(text.ends_with("<|im_start|>user\nHi<|im_end|>\n"));
}

#[test]
fn parts_split_contents_from_template_text() {
    let t = ChatTemplate::new(CHATML).unwrap();
    let messages = [
        ChatMessage::system("S"),
        ChatMessage::user("a <|im_end|> b"),
    ];
    let parts = t.render_parts(&messages, true).unwrap();
    assert_eq!(
        parts,
        [
            ChatPart::Template("<|im_start|>system\n".into()),
            ChatPart::Content("S".into()),
            ChatPart::Template("<|im_end|>\n<|im_start|>user\n".into()),
            ChatPart::Content("a <|im_end|> b".into()),
            ChatPart::Template("<|im_end|>\n<|im_start|>assistant\n".into()),
        ]
    );
    let joined: String = parts.iter().map(ChatPart::text).collect();
    assert_eq!(joined, t.render(&messages, true).unwrap());
    // Encoding: only template parts are parsed for specials.
    let ids = encode_parts(&parts, |text, special| {
        Ok::<_, ()>(vec![if special { 1 } else { 0 }; text.len().min(1)])
    })
    .unwrap();
    assert_eq!(ids, [1, 0, 1, 0, 1]);
}

#[test]
fn hf_helpers_work() {
    let t = ChatTemplate::new(
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'bad' %}\
         {{ raise_exception('no bad roles') }}{% endif %}{{ m.content.strip() | upper }}\
         {% endfor %}{{ eos_token }}",
    )
    .unwrap()
    .with_special_tokens("<s>", "</s>");
    assert_eq!(
        t.render(&[ChatMessage::user("  x ")], false).unwrap(),
        "<s>X</s>"
    );
    let err = t
        .render(&[ChatMessage::new("bad", "x")], false)
        .unwrap_err();
    assert!(format!("{:?}", err).contains("no bad roles"));
    assert!(matches!(
        ChatTemplate::new("{% for %}"),
        Err(ChatError::Compile(_))
    ));
}

#[test]
fn extra_variables_reach_the_template_and_a_request_overrides_a_default() {
    let template = ChatTemplate::new(
        "{% for m in messages %}{{ m.content }}{% endfor %}\
         {% if add_generation_prompt %}|{{ mode | default('none') }}\
         {% for t in tools %}+{{ t.name }}{% endfor %}{% endif %}",
    )
    .unwrap();
    let messages = [ChatMessage::user("a")];
    let default = TemplateVars::from_json_text(r#"{"mode": "fast", "tools": []}"#).unwrap();
    let request =
        TemplateVars::from_json_text(r#"{"mode": "slow", "tools": [{"name": "x"}]}"#).unwrap();
    assert_eq!(template.render(&messages, true).unwrap(), "a|none");
    let with_default = ChatTemplate::new(
        "{% for m in messages %}{{ m.content }}{% endfor %}|{{ mode | default('none') }}",
    )
    .unwrap()
    .with_vars(TemplateVars::from_json_text(r#"{"mode": "fast"}"#).unwrap());
    assert_eq!(with_default.render(&messages, false).unwrap(), "a|fast");
    let slow = TemplateVars::from_json_text(r#"{"mode": "slow"}"#).unwrap();
    assert_eq!(
        with_default.render_with(&messages, false, &slow).unwrap(),
        "a|slow"
    );
    assert_eq!(
        template.render_with(&messages, true, &default).unwrap(),
        "a|fast"
    );
    let both = default.overridden_by(&request);
    assert_eq!(
        template.render_with(&messages, true, &both).unwrap(),
        "a|slow+x"
    );
    let parts = template.render_parts_with(&messages, true, &both).unwrap();
    assert_eq!(
        parts,
        [
            ChatPart::Content("a".into()),
            ChatPart::Template("|slow+x".into())
        ]
    );
}

#[test]
fn extra_variables_must_be_an_object_of_new_names() {
    for (text, says) in [
        (r#"{"messages": []}"#, "'messages' is set by kindle"),
        (
            r#"{"add_generation_prompt": false}"#,
            "'add_generation_prompt'",
        ),
        ("[1]", "expected a JSON object"),
        ("{nope", "not JSON"),
    ] {
        let e = TemplateVars::from_json_text(text).unwrap_err();
        assert!(e.to_string().contains(says), "{text}: {e}");
    }
    assert!(TemplateVars::from_json_text("{}").unwrap().is_empty());
}

/// Drops the thinking of an assistant reply, as Qwen3's template does for earlier turns.
const DROPS_THINKING: &str = "{% for m in messages %}{% set c = m.content %}\
    {% if m.role == 'assistant' and '</think>' in c %}\
    {% set c = c.split('</think>')[-1].lstrip('\\n') %}{% endif %}\
    <|im_start|>{{ m.role }}\n{{ c }}<|im_end|>\n{% endfor %}";

#[test]
fn protected_texts_let_the_template_transform_contents_and_stay_text() {
    let messages = [
        ChatMessage::user("Hi <|im_end|> x \u{F8F0}1\u{F8F1}"),
        ChatMessage::assistant("<think>\nhmm\n</think>\n\nHello!"),
    ];
    let template = ChatTemplate::new(DROPS_THINKING)
        .unwrap()
        .with_protected_texts(["<|im_start|>", "<|im_end|>"])
        .unwrap();
    let parts = template.render_parts(&messages, false).unwrap();
    assert_eq!(
        parts,
        [
            ChatPart::Template("<|im_start|>user\nHi ".into()),
            ChatPart::Content("<|im_end|>".into()),
            ChatPart::Template(" x ".into()),
            // The markers' own characters in a message come back as they were.
            ChatPart::Content("\u{F8F0}".into()),
            ChatPart::Template("1".into()),
            ChatPart::Content("\u{F8F1}".into()),
            ChatPart::Template("<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n".into()),
        ]
    );
    let joined: String = parts.iter().map(ChatPart::text).collect();
    assert_eq!(joined, template.render(&messages, false).unwrap());
    // Without protected texts the contents go in whole and untransformed.
    let plain = ChatTemplate::new(DROPS_THINKING).unwrap();
    let parts = plain.render_parts(&messages, false).unwrap();
    assert_eq!(parts[3], ChatPart::Content(messages[1].content.clone()));
}

/// Tools and a tool call through a template in the style of Qwen2.5's, against the text
/// Python's `jinja2` renders with `transformers`' settings and `tojson` (keys in the
/// request's order, `<`, `&` and `'` as they are).
#[test]
fn tools_and_calls_render_as_transformers_and_their_control_texts_stay_text() {
    let tools = serde_json::json!([{"type": "function", "function": {
        "name": "calc", "description": "Compare a < b & c's",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}},
                       "required": ["expr"]}}}]);
    let call = serde_json::json!([{"type": "function", "function": {
        "name": "calc", "arguments": {"expr": "2<3", "note": "<|im_end|>"}}}]);
    let messages = [
        ChatMessage::user("Is 2<3?"),
        ChatMessage::assistant("").with_field("tool_calls", call),
    ];
    let mut vars = serde_json::Map::new();
    vars.insert("tools".into(), tools);
    let vars = TemplateVars::from_json(&vars).unwrap();
    let template = ChatTemplate::new(include_str!("tools_test.jinja")).unwrap();
    let python = "<|im_start|>system\n# Tools\n\n<tools>\n{\"type\": \"function\", \
        \"function\": {\"name\": \"calc\", \"description\": \"Compare a < b & c's\", \
        \"parameters\": {\"type\": \"object\", \"properties\": {\"expr\": {\"type\": \
        \"string\"}}, \"required\": [\"expr\"]}}}</tools><|im_end|>\n<|im_start|>user\n\
        Is 2<3?<|im_end|>\n<|im_start|>assistant<tool_call>\n{\"name\": \"calc\", \
        \"arguments\": {\"expr\": \"2<3\", \"note\": \"<|im_end|>\"}}\n</tool_call>\
        <|im_end|>\n";
    assert_eq!(
        template.render_with(&messages, false, &vars).unwrap(),
        python
    );
    // A control text in a call's arguments (or in the request's tools) is text.
    let protected = template
        .with_protected_texts(["<|im_start|>", "<|im_end|>"])
        .unwrap();
    let parts = protected
        .render_parts_with(&messages, false, &vars)
        .unwrap();
    let contents: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p {
            ChatPart::Content(c) => Some(c.as_str()),
            ChatPart::Template(_) => None,
        })
        .collect();
    assert_eq!(contents, ["<|im_end|>"]);
    let joined: String = parts.iter().map(ChatPart::text).collect();
    assert_eq!(joined, python);
}

/// SmolLM3's and TRL-trained templates mark the assistant's text with
/// `transformers`' `{% generation %}` block.
#[test]
fn generation_blocks_render_their_text() {
    let template = ChatTemplate::new(
        "{% for m in messages %}{% if m.role == 'assistant' %}<a>\n{%- generation -%}\n\
         {{ m.content }}{% endgeneration %}</a>{% else %}{{ m.content }}{% endif %}{% endfor %}",
    )
    .unwrap();
    let messages = [ChatMessage::user("Hi"), ChatMessage::assistant("Hello")];
    assert_eq!(template.render(&messages, false).unwrap(), "Hi<a>Hello</a>");
    assert!(template.source().contains("{%- generation -%}"));
}

#[test]
fn a_final_message_is_continued_where_its_content_ends() {
    let template = ChatTemplate::new(CHATML)
        .unwrap()
        .with_protected_texts(["<|im_start|>", "<|im_end|>"])
        .unwrap();
    let vars = TemplateVars::default();
    let messages = [
        ChatMessage::user("Capital of France?"),
        ChatMessage::assistant("It is <|im_end|> the"),
    ];
    let parts = template
        .render_parts_ending(&messages, ChatEnding::Continue, &vars)
        .unwrap();
    let joined: String = parts.iter().map(ChatPart::text).collect();
    assert!(
        joined.ends_with("<|im_start|>assistant\nIt is <|im_end|> the"),
        "{joined}"
    );
    // The control text in the content is still a content part.
    assert!(parts.contains(&ChatPart::Content("<|im_end|>".into())));
    // Closed and with a prompt, as `add_generation_prompt` false and true render them.
    let closed = template
        .render_parts_ending(&messages, ChatEnding::Closed, &vars)
        .unwrap();
    assert_eq!(closed, template.render_parts(&messages, false).unwrap());
    let prompt = template
        .render_parts_ending(&messages, ChatEnding::Prompt, &vars)
        .unwrap();
    assert_eq!(prompt, template.render_parts(&messages, true).unwrap());
    // A template that trims contents: the trimmed content is found.
    let trims = ChatTemplate::new(
        "{% for m in messages %}[{{ m.role }}]{{ m.content | trim }}[end]{% endfor %}",
    )
    .unwrap()
    .with_protected_texts(["[end]"])
    .unwrap();
    let messages = [ChatMessage::assistant(" Sure, ")];
    let parts = trims
        .render_parts_ending(&messages, ChatEnding::Continue, &vars)
        .unwrap();
    assert_eq!(parts, [ChatPart::Template("[assistant]Sure,".into())]);
    // Nothing to continue from.
    for messages in [
        vec![],
        vec![ChatMessage::assistant("  ")],
        vec![ChatMessage::assistant("x").with_field("hidden", serde_json::json!(1))],
    ] {
        let hides = ChatTemplate::new("{% for m in messages %}[{{ m.role }}]{% endfor %}").unwrap();
        let e = hides
            .render_parts_ending(&messages, ChatEnding::Continue, &vars)
            .unwrap_err();
        assert!(matches!(e, ChatError::Continue(_)), "{e}");
    }
}

#[test]
fn a_template_that_loops_too_long_is_stopped_with_a_clear_error() {
    // 10^10 iterations: without a bound the render never ends (a server would hang).
    let looping = ChatTemplate::new(
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let err = looping
        .render(&[ChatMessage::user("hi")], true)
        .unwrap_err();
    assert!(matches!(err, ChatError::OutOfFuel), "{err:?}");
    assert!(err.to_string().contains("instructions"), "{err}");
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
    // A long conversation is nowhere near the bound.
    let chatml = ChatTemplate::new(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
    )
    .unwrap();
    let messages: Vec<ChatMessage> = (0..20_000)
        .map(|i| ChatMessage::user(format!("m{i}")))
        .collect();
    assert!(chatml.render(&messages, true).is_ok());
}
