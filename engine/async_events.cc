// engine/async_events.cc: read, acknowledge, hand to owners (see header).
#include "engine/async_events.h"

namespace ferry::engine {

size_t AsyncReader::Step(size_t max) {
  size_t n = 0;
  for (Context* c : contexts_) {
    // Under the context's async lock: an owner re-enabling the context
    // cannot close the device while this reads from it.
    c->WithAsyncHandle([&](hal::ContextHandle h) {
      while (n < max) {
        auto ev = verbs_->GetAsyncEvent(h);
        if (!ev.ok()) break;
        verbs_->AckAsyncEvent(*ev);
        ++n;
        ++events_;
        // QP events go to every owner: only the one holding the QP acts (the
        // reader keeps no QP -> owner map: that would be shared state).
        for (uint32_t w = 0; w < workers_.size(); ++w) {
          workers_[w]->Push(InboxAsync{*ev});
          if (wake_) wake_(w);
        }
      }
    });
  }
  return n;
}

}  // namespace ferry::engine
