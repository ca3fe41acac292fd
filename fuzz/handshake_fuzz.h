// fuzz/handshake_fuzz.h: the body of the handshake decoder fuzz target.
//
// HandshakeFuzzOne is what libFuzzer runs on each input
// (fuzz/handshake_fuzz.cc) and what tests/engine/handshake_fuzz_replay_test
// replays over the seed corpus as a plain GTest. What must stay true for any
// input: decoding never crashes or reads out of bounds, and an accepted
// input is canonical: it re-encodes to exactly the same bytes and decodes to
// an equal message (a violation aborts via FERRY_CHECK).
#ifndef FERRY_FUZZ_HANDSHAKE_FUZZ_H_
#define FERRY_FUZZ_HANDSHAKE_FUZZ_H_

#include <cstddef>
#include <cstdint>

namespace ferry::fuzz {

// Returns true when the input decoded as a valid handshake message.
bool HandshakeFuzzOne(const uint8_t* data, size_t size);

}  // namespace ferry::fuzz

#endif  // FERRY_FUZZ_HANDSHAKE_FUZZ_H_
