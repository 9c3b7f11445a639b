// The tokenization coco-caption applies before BLEU, ROUGE-L and CIDEr-D, without Java: Stanford's PTBTokenizer
// (CoreNLP 3.4.1, run with -preserveLines -lowerCase) followed by coco-caption's removal of punctuation tokens.
//
// Rules reproduced (PTB conventions, then lower case, then the removal list):
//  - whitespace and control characters separate tokens;
//  - leading ( [ { " ' ` and trailing ) ] } " ' . , ; : ! ? are split off; "..." and runs of two or more periods are
//    one token; quotes become `` '' ` ', dashes (--, en and em dash) "--", brackets -LRB- -RRB- -LSB- -RSB- -LCB-
//    -RCB-; curly quotes and the ellipsis character are read as their ASCII forms;
//  - a comma, semicolon, ! or ? inside a word splits it, except a comma or colon between digits (1,000 10:30);
//  - a word-final period stays on acronyms (u.s.) and on single letters followed by periods (a.m.); periods inside
//    a word stay (3.5, www.example.com); hyphens inside a word stay (well-known);
//  - $ and # are split off the front, % off the end;
//  - clitics are split: n't ('can't' -> ca n't, 'won't' -> wo n't, 'ain't' -> ai n't), 's 'm 'd 'll 're 've, and
//    cannot -> can not, gonna -> gon na, gotta -> got ta, wanna -> wan na, lemme -> lem me, gimme -> gim me;
//  - every token is lower-cased (ASCII) after escaping, so -LRB- becomes -lrb-, which coco-caption's list
//    ('' ' `` ` -LRB- -RRB- -LCB- -RCB- . ? ! , : - -- ... ;) then does not remove: brackets stay as -lrb- tokens,
//    exactly as with the Java tokenizer.
// Not reproduced: PTBTokenizer's abbreviation list (mr. keeps its period in Java, becomes "mr" here), its
// British-to-American spelling rewrite, runs like "?!" kept as one token, URLs, e-mail addresses and emoticons.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vlm {

// The tokens coco-caption would score for `caption` (possibly none).
std::vector<std::string> coco_caption_tokens(std::string_view caption);

// The same tokens joined by single spaces (coco-caption's tokenized sentence).
std::string coco_caption_tokenize(std::string_view caption);

}  // namespace vlm
