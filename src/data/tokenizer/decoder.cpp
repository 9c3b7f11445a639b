// The decoder steps, each a transformation of the token list.
#include "data/tokenizer/decoder.h"

#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/unicode.h"

namespace vlm::tok {
namespace {

// The byte a "<0xAB>" token stands for, or -1.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string replace_all(const std::string& s, const DecoderStep& step) {
  std::vector<Span> matches;
  if (step.regex) {
    step.regex->find_all(s, matches);
  } else if (!step.text.empty()) {
    for (size_t p = s.find(step.text); p != std::string::npos; p = s.find(step.text, p + step.text.size())) {
      matches.push_back({p, p + step.text.size()});
    }
  }
  std::string out;
  size_t pos = 0;
  for (const Span& m : matches) {
    out.append(s, pos, m.begin - pos);
    out += step.content;
    pos = m.end;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string strip_token(const std::string& s, const std::string& c, int start, int stop) {
  size_t begin = 0, end = s.size();
  for (int i = 0; i < start && !c.empty() && s.compare(begin, c.size(), c) == 0; ++i) begin += c.size();
  for (int i = 0; i < stop && !c.empty() && end >= begin + c.size() && s.compare(end - c.size(), c.size(), c) == 0; ++i) {
    end -= c.size();
  }
  return s.substr(begin, end - begin);
}

void apply(const DecoderStep& step, std::vector<std::string>& tokens) {
  switch (step.kind) {
    case DecoderKind::byte_level: {
      std::string all;
      for (const std::string& t : tokens) {
        if (!byte_level_decode(t, all)) all += t;  // not byte-level text: its own bytes, as Hugging Face does
      }
      tokens.assign(1, std::move(all));
      return;
    }
    case DecoderKind::metaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string out;
        const std::string& t = tokens[i];
        for (size_t pos = 0; pos < t.size();) {
          if (!step.text.empty() && t.compare(pos, step.text.size(), step.text) == 0) {
            if (i != 0 || !step.prepend) out += ' ';  // the first token loses the prepended marker
            pos += step.text.size();
          } else {
            out += t[pos++];
          }
        }
        tokens[i] = std::move(out);
      }
      return;
    case DecoderKind::replace:
      for (std::string& t : tokens) t = replace_all(t, step);
      return;
    case DecoderKind::byte_fallback: {
      std::vector<std::string> out;
      std::string bytes;
      bool pending = false;
      for (std::string& t : tokens) {
        int b = fallback_byte(t);
        if (b >= 0) {
          bytes += static_cast<char>(b);
          pending = true;
          continue;
        }
        if (pending) out.push_back(std::move(bytes));
        bytes.clear();
        pending = false;
        out.push_back(std::move(t));
      }
      if (pending) out.push_back(std::move(bytes));
      tokens = std::move(out);
      return;
    }
    case DecoderKind::fuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      return;
    }
    case DecoderKind::strip:
      for (std::string& t : tokens) t = strip_token(t, step.content, step.start, step.stop);
      return;
  }
}

}  // namespace

std::string decode_tokens(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens) {
  for (const DecoderStep& step : steps) apply(step, tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace vlm::tok
