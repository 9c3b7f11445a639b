// The built-in filters, tests, methods and global functions of the interpreter: the part of Jinja's and Python's
// library that real chat templates use (trim, tojson, selectattr, items, string methods, namespace, ...).
#pragma once

#include <string>

#include "data/template/jinja_value.h"

namespace vlm::jinja {

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
// Raises TemplateError for bad arguments (naming the filter or test).
Value apply_filter(const std::string& name, const Value& input, Args& args);
bool apply_test(const std::string& name, const Value& input, Args& args);

// obj.name as Jinja resolves it for dicts, namespaces and strings: a bound method (str.strip, dict.items, ...),
// a dict value, or undefined (with a hint naming what is missing).
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: dict lookup, list/string index (negative counts from the end), else attribute lookup.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on lists and strings (null parts are undefined values).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// range, namespace, dict, raise_exception (its message becomes the render error) and strftime_now.
ValueDict global_functions();

}  // namespace vlm::jinja
