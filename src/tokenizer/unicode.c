/*
 * Unicode helpers of the tokenizer: UTF-8 decoding and encoding, and the
 * category flags that pre-tokenizer patterns test (\p{L}, \p{N}, \p{P}, \s).
 *
 * Categories are the Unicode general categories as utf8proc reports them.
 * \s is the Unicode White_Space property, which is what llama.cpp's tables
 * hold (they come from Python's `regex` module): U+0009-000D, U+0020, U+0085,
 * U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000. Note
 * that U+001C-001F are not whitespace here, unlike Python's str.isspace().
 * Unassigned, private-use and surrogate code points count as \p{C}, as they do
 * in llama.cpp's tables.
 */
#include "tokenizer/pretok.h"

#include <utf8proc.h>

/* ---- UTF-8 ------------------------------------------------------------- */

size_t ix__utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c < 0xC2) return 1; /* continuation byte, or overlong lead C0/C1 */
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    if (c < 0xF5) return 4;
    return 1; /* F5..FF would encode beyond U+10FFFF */
}

static bool is_cont(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

/* Strict decoding (no overlongs, no surrogates, nothing past U+10FFFF). The
 * tokenizer promises valid text, but callers also decode vocabulary pieces
 * from files, so a bad sequence costs one byte and yields U+FFFD instead of
 * reading past the end or looping. */
uint32_t ix__utf8_decode(const char *s, size_t len, size_t *n_bytes) {
    IX_ASSERT(len > 0);
    const unsigned char *u = (const unsigned char *)s;
    unsigned char c = u[0];
    size_t n = ix__utf8_len(c);
    if (n == 1) {
        *n_bytes = 1;
        return c < 0x80 ? c : 0xFFFD;
    }
    if (n > len) goto bad;
    if (n == 2) {
        if (!is_cont(u[1])) goto bad;
        *n_bytes = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if (n == 3) {
        if (!is_cont(u[1]) || !is_cont(u[2])) goto bad;
        if (c == 0xE0 && u[1] < 0xA0) goto bad;  /* overlong */
        if (c == 0xED && u[1] >= 0xA0) goto bad; /* UTF-16 surrogate */
        *n_bytes = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    if (!is_cont(u[1]) || !is_cont(u[2]) || !is_cont(u[3])) goto bad;
    if (c == 0xF0 && u[1] < 0x90) goto bad;  /* overlong */
    if (c == 0xF4 && u[1] >= 0x90) goto bad; /* beyond U+10FFFF */
    *n_bytes = 4;
    return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
           ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
bad:
    *n_bytes = 1;
    return 0xFFFD;
}

size_t ix__utf8_encode(uint32_t cp, char *out) {
    unsigned char *u = (unsigned char *)out;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        u[0] = (unsigned char)(0xC0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    /* A surrogate or an out-of-range value has no UTF-8 form; writing one
     * anyway would produce text that our own decoder rejects. */
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    u[0] = (unsigned char)(0xF0 | (cp >> 18));
    u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- categories -------------------------------------------------------- */

/* ASCII is most of what tokenizers see, so it skips utf8proc entirely. The
 * table is what the general path below yields for 0..127 (a test checks). */
/* clang-format off */
#define C_ IX__CP_CONTROL
#define CW (IX__CP_CONTROL | IX__CP_WHITESPACE)
#define W_ IX__CP_WHITESPACE
#define P_ IX__CP_PUNCT
#define S_ IX__CP_SYMBOL
#define N_ IX__CP_NUMBER
#define L_ IX__CP_LETTER
const unsigned char ix__cp_ascii_flags[128] = {
    /* 00 */ C_, C_, C_, C_, C_, C_, C_, C_, C_, CW, CW, CW, CW, CW, C_, C_,
    /* 10 */ C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_,
    /* 20    sp  !   "   #   $   %   &   '   (   )   *   +   ,   -   .   / */
             W_, P_, P_, P_, S_, P_, P_, P_, P_, P_, P_, S_, P_, P_, P_, P_,
    /* 30    0-9                                     :   ;   <   =   >   ? */
             N_, N_, N_, N_, N_, N_, N_, N_, N_, N_, P_, P_, S_, S_, S_, P_,
    /* 40    @   A-O */
             P_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_,
    /* 50    P-Z                                     [   \   ]   ^   _ */
             L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, P_, P_, P_, S_, P_,
    /* 60    `   a-o */
             S_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_,
    /* 70    p-z                                     {   |   }   ~  DEL */
             L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, P_, S_, P_, S_, C_,
};
#undef C_
#undef CW
#undef W_
#undef P_
#undef S_
#undef N_
#undef L_
/* clang-format on */

static bool is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return false;
    if (cp <= 0xA0) return cp == 0x85 || cp == 0xA0;
    if (cp < 0x1680) return false;
    if (cp == 0x1680) return true;
    if (cp >= 0x2000 && cp <= 0x200A) return true;
    return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

unsigned ix__cp_flags(uint32_t cp) {
    if (cp < 0x80) return ix__cp_ascii_flags[cp];
    unsigned f = is_white_space(cp) ? IX__CP_WHITESPACE : 0u;
    if (cp > 0x10FFFF) return IX__CP_CONTROL; /* no category; llama.cpp: "undefined" */
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return f | IX__CP_LETTER;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: return f | IX__CP_MARK;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return f | IX__CP_NUMBER;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return f | IX__CP_PUNCT;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO: return f | IX__CP_SYMBOL;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return f; /* all of Z is White_Space */
    default: return f | IX__CP_CONTROL;  /* Cc Cf Cs Co, and Cn (unassigned) */
    }
}
