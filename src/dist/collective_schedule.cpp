// CollectiveSchedule: issued collectives by (tag, key), joined into the compute stream (see collective_schedule.h).
#include "dist/collective_schedule.h"

#include <algorithm>

namespace vlm::dist {

std::string describe(const ScheduleEvent& e) {
  const char* type = e.type == ScheduleEvent::Type::issued ? "issued" : e.type == ScheduleEvent::Type::joined ? "joined"
                                                                                                                : "note";
  return str(type, " ", e.tag, " ", e.key);
}

CollectiveSchedule::~CollectiveSchedule() {
  // The Works' own destructors wait for them; `then` is skipped: its results would be read by no one.
  entries_.clear();
}

void CollectiveSchedule::record(ScheduleEvent::Type type, const std::string& tag, int key) {
  if (tracing_) events_.push_back({type, tag, key});
}

void CollectiveSchedule::note(const std::string& tag, int key) { record(ScheduleEvent::Type::note, tag, key); }

void CollectiveSchedule::add(const std::string& tag, int key, std::vector<WorkHandle> works,
                             std::function<void()> then) {
  VLM_CHECK(!pending(tag, key), "CollectiveSchedule: ", tag, " ", key, " issued again before it was joined");
  record(ScheduleEvent::Type::issued, tag, key);
  entries_.push_back({tag, key, std::move(works), std::move(then)});
}

bool CollectiveSchedule::pending(const std::string& tag, int key) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.tag == tag && e.key == key; });
}

size_t CollectiveSchedule::count(const std::string& tag) const {
  return static_cast<size_t>(
      std::count_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return tag.empty() || e.tag == tag; }));
}

Status CollectiveSchedule::finish(Entry& e) {
  Status first;
  for (WorkHandle& w : e.works) {
    Status s = w->wait_on(compute_);
    if (first.ok() && !s.ok()) first = std::move(s);
  }
  e.works.clear();  // ordered before the compute stream's next work: the buffers may go
  record(ScheduleEvent::Type::joined, e.tag, e.key);
  if (first.ok() && e.then) e.then();
  return first;
}

Status CollectiveSchedule::join(const std::string& tag, int key) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.tag == tag && e.key == key; });
  if (it == entries_.end()) return Status();
  Entry e = std::move(*it);
  entries_.erase(it);
  return finish(e);
}

Status CollectiveSchedule::join_all(const std::string& tag, size_t keep) {
  const size_t n = count(tag);
  if (n <= keep) return Status();
  size_t to_join = n - keep;
  Status first;
  for (auto it = entries_.begin(); it != entries_.end() && to_join > 0;) {
    if (!tag.empty() && it->tag != tag) {
      ++it;
      continue;
    }
    Entry e = std::move(*it);
    it = entries_.erase(it);
    --to_join;
    Status s = finish(e);
    if (first.ok() && !s.ok()) first = std::move(s);
  }
  return first;
}

}  // namespace vlm::dist
