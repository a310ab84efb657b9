// hf_config.h — a model's shape read from its Hugging Face `config.json`, as a user has it beside
// the checkpoint: hidden size, heads, KV heads, MLP width, layers, vocabulary, tied embeddings.
// Requires: model.h. Used by `cpbench compare --model config.json` (and anywhere a model preset
// is named by a path ending in config.json).
// Note: dense decoders only — the Llama family (llama, mistral, qwen2, qwen3, …: RMSNorm, RoPE,
// gated SiLU MLP) and GPT-2 (LayerNorm, learned positions, biases, 4h MLP unless n_inner). A
// mixture of experts, or a head size other than hidden / heads, is refused with the field named:
// cpbench's ModelShape does not describe it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/model/model.h"

namespace cpbench {

// model_type values read as the Llama family's layer.
const std::vector<std::string>& hf_llama_family();

// Reads `file` (a config.json). Errors name the file and the JSON pointer of the field: missing,
// of the wrong type or out of range, an architecture cpbench does not model. The shape's name is
// the config's "_name_or_path" when set, else its folder's name; its source names the file.
Expected<ModelShape> load_hf_config(const std::filesystem::path& file);

// Whether `path` names a Hugging Face config (a file called config.json, or a folder holding one).
bool is_hf_config_path(const std::filesystem::path& path);

}  // namespace cpbench
