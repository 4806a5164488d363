//! Chat templates (Jinja, as Hugging Face ships them in `tokenizer_config.json` and GGUF in
//! `tokenizer.chat_template`), rendered with minijinja.

use crate::LoadError;
use minijinja::{Environment, context};

/// A chat message, with the optional fields chat templates read.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Message {
    /// Who speaks: usually `system`, `user`, `assistant` or `tool`; the template decides.
    pub role: String,
    /// The message's text.
    pub content: String,
    /// The participant's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The call a tool message answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An assistant's earlier reasoning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl Message {
    /// A message with only a role and content.
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            ..Message::default()
        }
    }
}

/// A compiled chat template with the special tokens it may refer to.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Compiles `source`, with `raise_exception` and Python's string methods available;
    /// `bos_token` and `eos_token` are the values of the template's variables of those names.
    /// Fails with [`LoadError::Template`] where the source does not parse.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, LoadError> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template_owned("chat", source.to_string())
            .map_err(LoadError::Template)?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages`, ending with the assistant's turn opened.
    pub fn render(&self, messages: &[Message]) -> Result<String, LoadError> {
        self.render_with_tools(messages, None)
    }

    /// Renders `messages` with the `tools` variable set (OpenAI's tool list), for templates
    /// that describe tools themselves.
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
    ) -> Result<String, LoadError> {
        let t = self.env.get_template("chat").expect("added in new");
        t.render(context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => true,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
        .map_err(LoadError::Template)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_template() {
        let src = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nDefault<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "Hi")]).unwrap(),
            "<|im_start|>system\nDefault<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let s = t
            .render(&[
                Message::new("system", "Be brief."),
                Message::new("user", "Hi"),
            ])
            .unwrap();
        assert!(s.starts_with("<|im_start|>system\nBe brief.<|im_end|>"));
        // Python string methods work (pycompat).
        let t = ChatTemplate::new("{{ messages[0].content.strip() | upper }}", "", "").unwrap();
        assert_eq!(t.render(&[Message::new("user", "  x ")]).unwrap(), "X");
    }
}
