// fuzz/handshake_fuzz.h: the body of the control-message fuzz target: the
// handshake and auth decoders and the authenticating listener.
//
// HandshakeFuzzOne is what libFuzzer runs on each input
// (fuzz/handshake_fuzz.cc) and what tests/engine/handshake_fuzz_replay_test
// replays over the seed corpus as a plain GTest. What must stay true for any
// input: decoding never crashes or reads out of bounds, an authenticating
// listener fed it (as one message or a framed sequence) delivers nothing
// and opens no session, and an accepted
// input is canonical: it re-encodes to exactly the same bytes and decodes to
// an equal message (a violation aborts via FERRY_CHECK).
#ifndef FERRY_FUZZ_HANDSHAKE_FUZZ_H_
#define FERRY_FUZZ_HANDSHAKE_FUZZ_H_

#include <cstddef>
#include <cstdint>

namespace ferry::fuzz {

// Returns true when the input decoded as a valid handshake or auth message.
bool HandshakeFuzzOne(const uint8_t* data, size_t size);

}  // namespace ferry::fuzz

#endif  // FERRY_FUZZ_HANDSHAKE_FUZZ_H_
