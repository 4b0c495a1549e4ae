// JSON Schema -> GBNF (models/grammar/gbnf.h): the grammar the server enforces for response_format
// {"type": "json_schema"} (OpenAI) and the `json_schema` field (llama.cpp), and the generic JSON grammar of
// {"type": "json_object"}.
//
// Output is compact JSON: at most one space after ':' and ',' and none elsewhere, so that a sampled answer
// ends in a bounded number of tokens; numbers have at most 16 integer and 16 fraction digits and a two-digit
// exponent, so that every number is a finite double (a parser rejects 1e500).
//
// Supported keywords: type (one or a list), enum, const, properties, required, additionalProperties (false or
// absent: no other keys; true or a schema: any further keys after the listed ones), items, prefixItems,
// minItems, maxItems, minLength, maxLength, anyOf, oneOf, allOf of one schema, $ref to #/$defs/... or
// #/definitions/..., minimum / maximum / exclusiveMinimum / exclusiveMaximum on integers (a digit-range grammar),
// and the annotations (title, description, default, examples, $schema, $id, $comment, strict). Any other keyword
// (pattern, format, multipleOf, uniqueItems, not, ...), and a range on a number, is refused by name: a grammar
// that silently ignored it would produce answers the schema rejects.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace anelab::grammar {

// GBNF text for `schema`; throws anelab::Error "[json_schema] at PATH: WHAT" naming the keyword.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);  // key order kept (properties in order)
// GBNF text for any JSON object (response_format json_object).
std::string json_object_gbnf();

}  // namespace anelab::grammar
