// attn/data/data.hpp: tokenizers, batch samplers and span corruption for the trainers.
// Does not read files (the examples do, with attn::io) nor include question_answer.hpp, whose
// greedy evaluation needs nn/ (attn.hpp includes it).
#pragma once

#include "char_tokenizer.hpp"
#include "span_corruption.hpp"
#include "text_batches.hpp"
