// CRC-32C with the SSE 4.2 `crc32` instruction. Three independent streams over 3 × 4 KiB blocks
// hide the instruction's latency; they are joined by shifting the first two with a zero-extension
// done through the same instruction (crc of the stream's value followed by the later blocks'
// length of zero bytes), computed here by a precomputed GF(2) operator.
#include "crc32c_hw.h"
#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>

int logbook_crc32c_hw_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}

// Multiplies a 32x32 GF(2) matrix (columns) by a vector.
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

// The operator that appends `len` zero bytes to a (non-inverted) CRC-32C register.
static void zeros_operator(uint32_t *op, size_t len) {
    uint32_t even[32], odd[32];
    odd[0] = 0x82F63B78u;
    uint32_t row = 1;
    for (int n = 1; n < 32; n++) { odd[n] = row; row <<= 1; }
    gf2_square(even, odd);  // 2 zero bits
    gf2_square(odd, even);  // 4 zero bits
    // Identity to start.
    for (int n = 0; n < 32; n++) op[n] = 1u << n;
    do {
        gf2_square(even, odd);  // first pass: 1 zero byte
        if (len & 1) { uint32_t t[32]; for (int n = 0; n < 32; n++) t[n] = gf2_times(even, op[n]); memcpy(op, t, sizeof t); }
        len >>= 1;
        if (!len) break;
        gf2_square(odd, even);
        if (len & 1) { uint32_t t[32]; for (int n = 0; n < 32; n++) t[n] = gf2_times(odd, op[n]); memcpy(op, t, sizeof t); }
        len >>= 1;
    } while (len);
}

#define BLOCK 4096

// Byte-wise tables of the zero-append operator for BLOCK bytes, for a fast shift.
static uint32_t shift_table[4][256];
static int shift_ready;

static void init_shift(void) {
    uint32_t op[32];
    zeros_operator(op, BLOCK);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) shift_table[k][b] = gf2_times(op, b << (8 * k));
    __atomic_store_n(&shift_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t shift(uint32_t crc) {
    return shift_table[0][crc & 0xFF] ^ shift_table[1][(crc >> 8) & 0xFF] ^ shift_table[2][(crc >> 16) & 0xFF] ^ shift_table[3][crc >> 24];
}

__attribute__((target("sse4.2")))
uint32_t logbook_crc32c_hw_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = bytes;
    uint64_t c0 = crc;
    if (count >= 3 * BLOCK) {
        if (!__atomic_load_n(&shift_ready, __ATOMIC_ACQUIRE)) init_shift();
        while (count >= 3 * BLOCK) {
            uint64_t c1 = 0, c2 = 0;
            for (size_t i = 0; i < BLOCK; i += 8) {
                uint64_t a, b, d;
                memcpy(&a, p + i, 8);
                memcpy(&b, p + BLOCK + i, 8);
                memcpy(&d, p + 2 * BLOCK + i, 8);
                c0 = _mm_crc32_u64(c0, a);
                c1 = _mm_crc32_u64(c1, b);
                c2 = _mm_crc32_u64(c2, d);
            }
            c0 = shift(shift((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
            p += 3 * BLOCK;
            count -= 3 * BLOCK;
        }
    }
    while (count >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c0 = _mm_crc32_u64(c0, v);
        p += 8;
        count -= 8;
    }
    uint32_t c = (uint32_t)c0;
    while (count--) c = _mm_crc32_u8(c, *p++);
    return c;
}

#else

int logbook_crc32c_hw_available(void) { return 0; }
uint32_t logbook_crc32c_hw_update(uint32_t crc, const void *bytes, size_t count) { (void)bytes; (void)count; return crc; }

#endif
