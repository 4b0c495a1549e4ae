// One accessor per architecture file (models/arch/<name>.cpp); only registry.cpp includes this.
#pragma once
#include "models/arch/arch.h"

namespace anelab::models {

const Arch& llama_arch();   // models/arch/llama.cpp
const Arch& qwen2_arch();   // models/arch/qwen2.cpp
const Arch& gpt2_arch();    // models/arch/gpt2.cpp
const Arch& gemma3_arch();  // models/arch/gemma3.cpp
const Arch& qwen3_arch();   // models/arch/qwen3.cpp
const Arch& qwen35_arch();  // models/arch/qwen35.cpp

}  // namespace anelab::models
