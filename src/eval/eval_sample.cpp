// Parsing of the evaluation fields of a sample's json and txt.
#include "eval/eval_sample.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

namespace vlm {
namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t' || s[b] == '\n' || s[b] == '\r')) ++b;
  return s.substr(b);
}

std::string most_frequent(const std::vector<std::string>& answers) {
  std::map<std::string, int> count;
  for (const auto& a : answers) ++count[a];
  std::string best = answers.front();
  for (const auto& a : answers)
    if (count[a] > count[best]) best = a;
  return best;
}

Expected<EvalQuestion> parse_question(const nlohmann::json& qa, const std::string& where) {
  if (!qa.is_object()) return parse_error(where + ": not an object");
  if (!qa.contains("question") || !qa["question"].is_string()) return parse_error(where + ": no string \"question\"");
  EvalQuestion q;
  q.question = qa["question"].get<std::string>();
  if (qa.contains("answers")) {
    const auto& list = qa["answers"];
    if (!list.is_array() || list.empty()) return parse_error(where + ".answers: not a non-empty list");
    for (size_t i = 0; i < list.size(); ++i) {
      const auto& a = list[i];
      if (a.is_string()) q.answers.push_back(a.get<std::string>());
      else if (a.is_object() && a.contains("answer") && a["answer"].is_string())
        q.answers.push_back(a["answer"].get<std::string>());
      else return parse_error(where + ".answers[" + std::to_string(i) + "]: neither a string nor {\"answer\": string}");
    }
  }
  if (qa.contains("answer")) {
    if (!qa["answer"].is_string()) return parse_error(where + ".answer: not a string");
    q.answer = qa["answer"].get<std::string>();
  } else if (!q.answers.empty()) {
    q.answer = most_frequent(q.answers);
  } else {
    return parse_error(where + ": no \"answer\" or \"answers\"");
  }
  for (const char* field : {"type", "question_type", "answer_type"}) {
    if (!qa.contains(field)) continue;
    if (!qa[field].is_string()) return parse_error(where + "." + field + ": not a string");
    std::string& dst = std::string(field) == "answer_type" ? q.answer_type : q.type;
    if (dst.empty()) dst = qa[field].get<std::string>();
  }
  return q;
}

void add_caption(std::vector<std::string>& captions, std::string c) {
  c = trimmed(std::move(c));
  if (!c.empty() && std::find(captions.begin(), captions.end(), c) == captions.end()) captions.push_back(std::move(c));
}

}  // namespace

Expected<EvalSampleText> parse_eval_sample(const WebDatasetSample& sample) {
  EvalSampleText out;
  out.key = sample.key;
  const std::string where = sample.shard + ": " + sample.key + ".json";
  add_caption(out.captions, sample.text("txt"));
  const auto* bytes = sample.get("json");
  if (!bytes) return out;
  nlohmann::json j = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return parse_error(where + ": not a JSON object");
  if (j.contains("qa")) {
    if (!j["qa"].is_array()) return parse_error(where + ": \"qa\" is not a list");
    for (size_t i = 0; i < j["qa"].size(); ++i) {
      VLM_ASSIGN_OR_RETURN(EvalQuestion q, parse_question(j["qa"][i], where + ": qa[" + std::to_string(i) + "]"));
      out.questions.push_back(std::move(q));
    }
  }
  if (j.contains("caption")) {
    if (!j["caption"].is_string()) return parse_error(where + ": \"caption\" is not a string");
    add_caption(out.captions, j["caption"].get<std::string>());
  }
  if (j.contains("captions")) {
    if (!j["captions"].is_array()) return parse_error(where + ": \"captions\" is not a list");
    for (size_t i = 0; i < j["captions"].size(); ++i) {
      if (!j["captions"][i].is_string())
        return parse_error(where + ": captions[" + std::to_string(i) + "] is not a string");
      add_caption(out.captions, j["captions"][i].get<std::string>());
    }
  }
  if (j.contains("class")) {
    const auto& c = j["class"];
    if (c.is_string()) out.label = c.get<std::string>();
    else if (c.is_number_integer()) out.label = std::to_string(c.get<int64_t>());
    else return parse_error(where + ": \"class\" is neither a string nor an integer");
  }
  return out;
}

}  // namespace vlm
