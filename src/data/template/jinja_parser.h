// Jinja template source -> syntax tree, with the lexer settings Hugging Face renders chat templates under
// (trim_blocks, lstrip_blocks, a single trailing newline dropped, \r\n and \r read as \n).
#pragma once

#include <string>

#include "data/template/jinja_ast.h"

namespace vlm::jinja {

// Parses `source`. Syntax errors and constructs this interpreter does not implement (include, extends, call
// blocks, ...) raise TemplateError with a message naming the construct, its line and column.
Body parse_template(const std::string& source);

}  // namespace vlm::jinja
