// The Jinja lexer: template source -> tokens (text, {{ }} / {% %} delimiters, names, literals, operators), with
// comments dropped and the whitespace rules applied as Jinja's lexer applies them under transformers' settings:
// "-" strips all whitespace beside a tag, trim_blocks drops the newline after a block or comment tag,
// lstrip_blocks removes the indentation before one, \r\n and \r read as \n, one trailing newline dropped.
#pragma once

#include <string>
#include <vector>

#include "data/template/jinja_ast.h"

namespace vlm::jinja {

enum class Tok : uint8_t { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok kind;
  std::string text;  // text data, name, operator, or the raw literal
  Value literal;     // string / number value
  Pos pos;
};

// Raises TemplateError "line L, column C: msg".
[[noreturn]] void fail(const Pos& pos, const std::string& msg);

// The tokens of `source`, ending with an eof token. Raises TemplateError for unterminated tags, comments and
// strings, unbalanced brackets and characters outside the syntax.
std::vector<Token> lex_template(const std::string& source);

}  // namespace vlm::jinja
