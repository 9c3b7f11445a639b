// VQA answer normalization and accuracy as the official VQA evaluation (vqaEval.py) computes them.
//
// Normalization: processPunctuation (punctuation removed, or replaced by a space where it joins two words, periods
// dropped unless a digit follows, at most 32 of them, as the reference's re.sub(..., re.UNICODE) count does) then
// processDigitArticle (lower case, number words zero..ten and none to digits, articles a/an/the dropped,
// contractions without apostrophe restored: dont -> don't).
// Accuracy of one prediction against the human answers: for each answer i, min(1, #(other answers equal to the
// prediction) / 3), averaged over i (the ten leave-one-out subsets of the official eval). Like the reference, the
// answers and the prediction are normalized only when the answers are not all the same string.
#pragma once

#include <string>
#include <vector>

namespace vlm {

std::string vqa_process_punctuation(const std::string& text);
std::string vqa_process_digit_article(const std::string& text);
// Newlines and tabs as spaces, trimmed, then processPunctuation and processDigitArticle (what answer processors such
// as EvalAI's apply to predictions before they are scored).
std::string vqa_normalize_answer(const std::string& text);

// The official accuracy in [0, 1] of `prediction` against `answers` (0 when there are none; with one answer it is
// always 0, as in the official formula: use exact match for single-answer sets).
double vqa_accuracy(const std::string& prediction, const std::vector<std::string>& answers);

}  // namespace vlm
