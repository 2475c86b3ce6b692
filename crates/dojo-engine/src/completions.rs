//! OpenAI chat and text completions on top of [`Engine::generate`], shared by `dojo serve` and
//! the in-process [`ChatBackend`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use dojo_llm::{
    BoxFuture, ChatBackend, ChatMessage, ChatRequest, ChatResponse, Choice, ChoiceLogprobs,
    LlmError, MessageContent, Role, Stop, TokenLogprob, ToolCall, TopLogprob, Usage,
};
use dojo_tokenizer::RenderOptions;
use serde_json::{Map, Value as Json, json};

use crate::EngineError;
use crate::engine::{Engine, FinishReason, GenerateRequest, Generation};
use crate::sampling::SamplingParams;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::Request(msg.into())
}

/// Sampling knobs shared by chat and text completions (OpenAI names + vLLM's `top_k`).
struct Knobs {
    sampling: SamplingParams,
    max_tokens: Option<u32>,
    stop: Vec<String>,
    n: u32,
    top_logprobs: usize,
}

/// The request's sampling fields, before validation.
struct RawKnobs<'a> {
    temperature: Option<f64>,
    top_p: Option<f64>,
    /// Vendor fields (`top_k`).
    extra: &'a Map<String, Json>,
    seed: Option<u64>,
    max_tokens: Option<u32>,
    stop: Option<&'a Stop>,
    n: Option<u32>,
    top_logprobs: usize,
}

fn knobs(raw: RawKnobs<'_>) -> Result<Knobs, EngineError> {
    let RawKnobs {
        temperature,
        top_p,
        extra,
        seed,
        max_tokens,
        stop,
        n,
        top_logprobs,
    } = raw;
    let temperature = temperature.unwrap_or(1.0);
    if !(0.0..=100.0).contains(&temperature) {
        return Err(bad(format!(
            "temperature {temperature} is out of range [0, 100]"
        )));
    }
    let top_p = top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(bad(format!("top_p {top_p} is out of range (0, 1]")));
    }
    let top_k = match extra.get("top_k") {
        None | Some(Json::Null) => 0,
        Some(v) => match v.as_i64() {
            Some(k) if k <= 0 => 0,
            Some(k) => k as usize,
            None => return Err(bad(format!("top_k must be an integer, got {v}"))),
        },
    };
    let n = n.unwrap_or(1);
    if !(1..=16).contains(&n) {
        return Err(bad(format!("n = {n} is out of range [1, 16]")));
    }
    if top_logprobs > 20 {
        return Err(bad("top_logprobs must be at most 20"));
    }
    let stop = match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if max_tokens == Some(0) {
        return Err(bad("max_tokens must be at least 1"));
    }
    Ok(Knobs {
        sampling: SamplingParams {
            temperature: temperature as f32,
            top_p: top_p as f32,
            top_k,
            seed,
        },
        max_tokens,
        stop,
        n,
        top_logprobs,
    })
}

/// A chat request's messages and tools as JSON for the template (no tools: `None`), after the
/// checks that come first (no streaming, some messages).
fn chat_json(req: &ChatRequest) -> Result<(Vec<Json>, Option<Vec<Json>>), EngineError> {
    if req.stream == Some(true) {
        return Err(bad(
            "streaming is not supported by dojo serve; send stream: false",
        ));
    }
    if req.messages.is_empty() {
        return Err(bad("messages must not be empty"));
    }
    let messages: Vec<Json> = req
        .messages
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(|source| EngineError::RequestJson {
            what: "messages",
            source,
        })?;
    let tools: Option<Vec<Json>> = match &req.tools {
        Some(t) if !t.is_empty() => Some(
            t.iter()
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()
                .map_err(|source| EngineError::RequestJson {
                    what: "tools",
                    source,
                })?,
        ),
        _ => None,
    };
    Ok((messages, tools))
}

/// The request's `chat_template_kwargs`, for the template.
fn template_kwargs(req: &ChatRequest) -> Result<Option<Map<String, Json>>, EngineError> {
    match req.extra.get("chat_template_kwargs") {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Object(m)) => Ok(Some(m.clone())),
        Some(other) => Err(bad(format!(
            "chat_template_kwargs must be an object, got {other}"
        ))),
    }
}

/// The opening of the tool call that `tool_choice` forces (empty: none). A named `tool_choice`
/// (or `required` with a single tool) is enforced by starting the assistant turn with the
/// call's opening, as guided decoding would; those forced tokens end the prompt
/// (`prompt_token_ids`), they are not sampled.
fn forced_call(req: &ChatRequest, tools: Option<&[Json]>) -> Result<String, EngineError> {
    let forced_name = match &req.tool_choice {
        Some(Json::Object(o)) => o
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Json::as_str)
            .map(str::to_string),
        Some(Json::String(s)) if s == "required" => match req.tools.as_deref() {
            Some([only]) => Some(only.function.name.clone()),
            _ => None,
        },
        _ => None,
    };
    match (&forced_name, tools) {
        (Some(name), Some(t)) => {
            if !t.iter().any(|t| t["function"]["name"] == name.as_str()) {
                return Err(bad(format!(
                    "tool_choice names `{name}`, which is not in tools"
                )));
            }
            Ok(format!(
                "<tool_call>\n{{\"name\": {}, \"arguments\": ",
                json!(name)
            ))
        }
        (Some(_), None) => Err(bad("tool_choice names a function but no tools were given")),
        _ => Ok(String::new()),
    }
}

/// A text completion's sampling knobs, whether it asks for logprobs, and whether it stops at
/// the end-of-sequence token.
fn completion_knobs(obj: &Map<String, Json>) -> Result<(Knobs, bool, bool), EngineError> {
    let f = |k: &str| obj.get(k).and_then(Json::as_f64);
    let u = |k: &str| obj.get(k).and_then(Json::as_u64);
    let stop: Option<Stop> = match obj.get("stop") {
        None | Some(Json::Null) => None,
        Some(v) => Some(
            serde_json::from_value(v.clone())
                .map_err(|_| bad("stop must be a string or a list of strings"))?,
        ),
    };
    let top_logprobs = u("logprobs").unwrap_or(0) as usize;
    let want_logprobs = obj.get("logprobs").is_some_and(|v| !v.is_null());
    let k = knobs(RawKnobs {
        temperature: f("temperature"),
        top_p: f("top_p"),
        extra: obj,
        seed: u("seed"),
        max_tokens: Some(u("max_tokens").unwrap_or(16) as u32),
        stop: stop.as_ref(),
        n: u("n").map(|n| n as u32),
        top_logprobs,
    })?;
    let stop_at_eos = !obj
        .get("ignore_eos")
        .and_then(Json::as_bool)
        .unwrap_or(false);
    Ok((k, want_logprobs, stop_at_eos))
}

impl Engine {
    /// Generate `n` choices for one prompt (seeds `seed`, `seed+1`, …).
    async fn generate_n(
        &self,
        prompt: Vec<u32>,
        k: &Knobs,
        stop_at_eos: bool,
    ) -> Result<Vec<Generation>, EngineError> {
        let room = self.context_length().saturating_sub(prompt.len());
        if room == 0 {
            return Err(EngineError::ContextLength {
                tokens: prompt.len(),
                limit: self.context_length(),
            });
        }
        let max_tokens = k.max_tokens.map_or(room, |m| (m as usize).min(room));
        let mut outs = Vec::with_capacity(k.n as usize);
        for i in 0..k.n {
            let mut sampling = k.sampling.clone();
            // Choice 0 is what the same request with n = 1 samples; the others get streams of
            // their own (an offset seed would be another request's stream).
            sampling.seed = sampling.seed.map(|s| {
                if i == 0 {
                    s
                } else {
                    dojo_llm::derive_seed(s, u64::from(i))
                }
            });
            outs.push(self.generate(GenerateRequest {
                prompt: prompt.clone(),
                sampling,
                max_tokens,
                stop: k.stop.clone(),
                stop_at_eos,
                top_logprobs: k.top_logprobs,
            }));
        }
        futures::future::try_join_all(outs).await
    }

    /// Answer an OpenAI chat completion request.
    pub async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, EngineError> {
        let (messages, tools) = chat_json(&req)?;
        let parse_tools =
            tools.is_some() && req.tool_choice.as_ref().and_then(Json::as_str) != Some("none");
        let extra = template_kwargs(&req)?;
        let forced = forced_call(&req, tools.as_deref())?;
        let prompt = self.chat_prompt(&messages, tools.as_deref(), extra, &forced)?;
        let want_logprobs = req.logprobs == Some(true);
        let k = knobs(RawKnobs {
            temperature: req.temperature,
            top_p: req.top_p,
            extra: &req.extra,
            seed: req.seed,
            max_tokens: req.max_completion_tokens.or(req.max_tokens),
            stop: req.stop.as_ref(),
            n: req.n,
            top_logprobs: if want_logprobs {
                req.top_logprobs.unwrap_or(0) as usize
            } else {
                0
            },
        })?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let gens = self.generate_n(prompt.ids.clone(), &k, true).await?;
        let mut usage = Usage::default();
        let mut choices = Vec::with_capacity(gens.len());
        for (i, g) in gens.into_iter().enumerate() {
            usage.completion_tokens += g.token_ids.len() as u64;
            let call_prefix = format!("call_{id}_{i}_");
            let parse = parse_tools.then_some((forced.as_str(), call_prefix.as_str()));
            choices.push(self.chat_choice(i, g, parse, want_logprobs));
        }
        usage.prompt_tokens = prompt.ids.len() as u64;
        usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
        Ok(ChatResponse {
            id: format!("chatcmpl-{id}"),
            object: "chat.completion".into(),
            created: now(),
            model: self.model_id().to_string(),
            choices,
            usage: Some(usage),
            system_fingerprint: None,
            prompt_token_ids: Some(prompt.ids),
            extra: Map::new(),
        })
    }

    /// The rendered prompt of a chat request, ending in the `forced` opening of a tool call
    /// (empty: none).
    fn chat_prompt(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        extra: Option<Map<String, Json>>,
        forced: &str,
    ) -> Result<dojo_tokenizer::Prompt, EngineError> {
        let mut prompt = self
            .format()
            .prompt(
                messages,
                tools,
                &RenderOptions {
                    add_generation_prompt: true,
                    extra,
                },
            )
            .map_err(EngineError::RequestChat)?;
        if !forced.is_empty() {
            let ids = self
                .format()
                .tokenizer
                .encode(forced)
                .map_err(EngineError::RequestChat)?;
            prompt.ids.extend(ids);
            prompt.text.push_str(forced);
        }
        Ok(prompt)
    }

    /// Choice `i` of a chat completion. `parse`: the tool calls are parsed out of the text (with
    /// the forced opening the prompt ended in, and the prefix of their call ids).
    fn chat_choice(
        &self,
        i: usize,
        g: Generation,
        parse: Option<(&str, &str)>,
        want_logprobs: bool,
    ) -> Choice {
        let (content, tool_calls) = if let Some((forced, call_prefix)) = parse {
            let text = format!("{forced}{}", g.text);
            let p = dojo_tokenizer::parse_tool_calls(&text, call_prefix);
            let calls: Vec<ToolCall> = p
                .tool_calls
                .into_iter()
                .filter_map(|c| serde_json::from_value(c).ok())
                .collect();
            (p.content, calls)
        } else {
            (Some(g.text.clone()), Vec::new())
        };
        let finish = if !tool_calls.is_empty() && g.finish_reason == FinishReason::Stop {
            "tool_calls"
        } else {
            g.finish_reason.as_str()
        };
        let logprobs = want_logprobs.then(|| self.choice_logprobs(&g));
        let mut extra = Map::new();
        if let Some(s) = &g.stop_string {
            extra.insert("stop_reason".into(), json!(s));
        }
        extra.insert("cached_tokens".into(), json!(g.cached_tokens));
        Choice {
            index: i as u32,
            message: ChatMessage {
                role: Role::Assistant,
                content: content.map(MessageContent::Text),
                name: None,
                tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
                tool_call_id: None,
                extra: Map::new(),
            },
            finish_reason: Some(finish.to_string()),
            logprobs,
            token_ids: Some(g.token_ids),
            extra,
        }
    }

    fn token_text(&self, id: u32) -> String {
        self.format().tokenizer.decode(&[id]).unwrap_or_default()
    }

    fn choice_logprobs(&self, g: &Generation) -> ChoiceLogprobs {
        let content = g
            .token_ids
            .iter()
            .zip(&g.logprobs)
            .zip(&g.top_logprobs)
            .map(|((&id, &lp), top)| {
                let token = self.token_text(id);
                TokenLogprob {
                    bytes: Some(token.as_bytes().to_vec()),
                    token,
                    logprob: lp as f64,
                    top_logprobs: top
                        .iter()
                        .map(|&(t, l)| {
                            let token = self.token_text(t);
                            TopLogprob {
                                bytes: Some(token.as_bytes().to_vec()),
                                token,
                                logprob: l as f64,
                            }
                        })
                        .collect(),
                    extra: Map::new(),
                }
            })
            .collect();
        ChoiceLogprobs {
            content: Some(content),
            extra: Map::new(),
        }
    }

    /// Answer an OpenAI `/v1/completions` request (JSON in, JSON out). `prompt` may be text or
    /// token ids (`[1, 2, 3]`, or `[[1, 2, 3]]`); text is tokenized as is (BOS added when the
    /// model asks for it).
    pub async fn completion(&self, body: Json) -> Result<Json, EngineError> {
        let obj = body
            .as_object()
            .ok_or_else(|| bad("the request body must be a JSON object"))?;
        if obj.get("stream").and_then(Json::as_bool) == Some(true) {
            return Err(bad(
                "streaming is not supported by dojo serve; send stream: false",
            ));
        }
        let prompt = self.completion_prompt(obj)?;
        let (k, want_logprobs, stop_at_eos) = completion_knobs(obj)?;
        let gens = self.generate_n(prompt.clone(), &k, stop_at_eos).await?;
        let completion_tokens: usize = gens.iter().map(|g| g.token_ids.len()).sum();
        let choices: Vec<Json> = gens
            .into_iter()
            .enumerate()
            .map(|(i, g)| self.completion_choice(i, g, want_logprobs))
            .collect();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(json!({
            "id": format!("cmpl-{id}"),
            "object": "text_completion",
            "created": now(),
            "model": self.model_id(),
            "choices": choices,
            "prompt_token_ids": prompt,
            "usage": {
                "prompt_tokens": prompt.len(),
                "completion_tokens": completion_tokens,
                "total_tokens": prompt.len() + completion_tokens,
            },
        }))
    }

    /// A text completion's prompt: text (tokenized as is, BOS added when the model asks for it)
    /// or token ids (`[1, 2, 3]`, or `[[1, 2, 3]]`).
    fn completion_prompt(&self, obj: &Map<String, Json>) -> Result<Vec<u32>, EngineError> {
        let ids_of = |v: &Json| -> Option<Vec<u32>> {
            v.as_array()?
                .iter()
                .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect()
        };
        let prompt: Vec<u32> = match obj.get("prompt") {
            Some(Json::String(s)) => {
                let mut ids = Vec::new();
                let tok = &self.format().tokenizer;
                if tok.add_bos()
                    && let Some(b) = tok.bos_id()
                {
                    ids.push(b);
                }
                ids.extend(tok.encode(s).map_err(EngineError::RequestChat)?);
                ids
            }
            Some(v @ Json::Array(a)) => match a.first() {
                Some(Json::Array(_)) if a.len() == 1 => ids_of(&a[0]),
                Some(Json::Array(_)) => {
                    return Err(bad("only one prompt per request is supported"));
                }
                _ => ids_of(v),
            }
            .ok_or_else(|| bad("prompt must be a string or a list of token ids"))?,
            _ => return Err(bad("prompt must be a string or a list of token ids")),
        };
        Ok(prompt)
    }

    /// Choice `i` of a text completion, as JSON.
    fn completion_choice(&self, i: usize, g: Generation, want_logprobs: bool) -> Json {
        let logprobs = want_logprobs.then(|| {
            json!({
                "tokens": g.token_ids.iter().map(|&t| self.token_text(t)).collect::<Vec<_>>(),
                "token_logprobs": g.logprobs,
                "top_logprobs": g.top_logprobs.iter().map(|top| {
                    top.iter().map(|&(t, l)| (self.token_text(t), json!(l))).collect::<Map<_, _>>()
                }).collect::<Vec<_>>(),
            })
        });
        json!({
            "index": i,
            "text": g.text,
            "logprobs": logprobs,
            "finish_reason": g.finish_reason.as_str(),
            "stop_reason": g.stop_string,
            "token_ids": g.token_ids,
            "cached_tokens": g.cached_tokens,
        })
    }
}

/// The in-process policy: rollouts call the engine directly, no HTTP.
impl ChatBackend for Engine {
    fn complete(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let endpoint = format!("embedded:{}", self.model_id());
            self.chat(req).await.map_err(|e| match e {
                EngineError::ContextLength { .. } => LlmError::ContextLength {
                    endpoint,
                    body: e.to_string(),
                },
                EngineError::Request(_)
                | EngineError::RequestJson { .. }
                | EngineError::RequestChat(_) => LlmError::Rejected {
                    endpoint,
                    status: 400,
                    body: e.to_string(),
                },
                other => LlmError::backend_failed(endpoint, other),
            })
        })
    }

    fn describe(&self) -> String {
        format!("embedded:{}", self.model_id())
    }

    fn context_tokens(&self) -> Option<usize> {
        Some(self.context_length())
    }
}
