// Chat messages -> prompt token ids, in the Llama 3 family's chat format (Llama 3, 3.1, 3.2 and
// 3.3 instruct models) or ChatML (Qwen2, Qwen2.5; apply_chatml below), written out here rather
// than by running the model's Jinja template. The Llama 3 format:
//
//   <|begin_of_text|>
//   for each message: <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//   when add_generation_prompt: <|start_header_id|>assistant<|end_header_id|>\n\n
//
// CONTENT is the message's content with leading and trailing whitespace removed (the template's
// `| trim`). The text between special tokens is encoded with Tokenizer::encode, so special-token
// text inside a content is matched as the special token, exactly as tokenising the rendered
// template does. Roles: system, user, assistant, ipython (Llama 3.1's tool results). Llama 3.1's
// default system preamble (knowledge cutoff date, tools) is not added.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "serving/tokenizer.h"

namespace servelab {

struct ChatMessage {
  std::string role;
  std::string content;
};

// The Llama 3 chat format (<|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n
// content<|eot_id|> ..., then the assistant header when add_generation_prompt). With
// continue_final_message (Hugging Face's and vLLM's), the last message stays open: its content
// (trimmed, as the template trims it) ends the prompt, without <|eot_id|>, so the model goes on
// with it. ConfigError on an unknown role or a tokenizer lacking the special tokens.
std::vector<std::int32_t> apply_chat_template(const Tokenizer& tok,
                                              std::span<const ChatMessage> msgs,
                                              bool add_generation_prompt = true,
                                              bool continue_final_message = false);

// True when `tok` has the Llama 3 chat format's special tokens.
bool has_llama3_chat_tokens(const Tokenizer& tok);

// The ChatML format of Qwen2 and Qwen2.5 instruct models: for each message
// "<|im_start|>ROLE\nCONTENT<|im_end|>\n" (CONTENT as given: the templates do not trim), then
// "<|im_start|>assistant\n" when add_generation_prompt; with continue_final_message the last
// message ends after its content. The text is encoded whole with Tokenizer::encode, as vLLM
// encodes a rendered template. Not written: the default system message the Qwen templates add
// when the first message is not a system one (Qwen2: "You are a helpful assistant."; Qwen2.5:
// "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."): send it as the
// first message to match vLLM. Roles: system, user, assistant. ConfigError on an unknown role or
// a tokenizer without <|im_start|> and <|im_end|>.
std::vector<std::int32_t> apply_chatml(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                       bool add_generation_prompt = true,
                                       bool continue_final_message = false);

// True when `tok` has ChatML's <|im_start|> and <|im_end|>.
bool has_chatml_tokens(const Tokenizer& tok);

// What `engine serve` encodes chat messages with: apply_chat_template when the tokenizer has the
// Llama 3 special tokens, apply_chatml when it has ChatML's; otherwise (a vocabulary without chat
// tokens, such as the tiny model's byte tokenizer) the plain text "ROLE: CONTENT\n" per message
// (the last without its "\n" with continue_final_message), then "assistant: " when
// add_generation_prompt, encoded with Tokenizer::encode.
std::vector<std::int32_t> encode_chat(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                      bool add_generation_prompt = true,
                                      bool continue_final_message = false);

}  // namespace servelab
