/* Names in messages as Python's repr shows them, so the C reader's messages are the Python
 * reader's words (internal.h). */
#include <string.h>

#include "internal.h"

static char *escape(char *o, const char *code) {
  while (*code) *o++ = *code++;
  return o;
}

static char *hex_escape(char *o, unsigned char c) {
  static const char digits[] = "0123456789abcdef";
  *o++ = '\\', *o++ = 'x', *o++ = digits[c >> 4], *o++ = digits[c & 15];
  return o;
}

const char *tccrt_repr(tccrt_repr_t *out, const char *s) {
  char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
  char *o = out->text;
  size_t i = 0;
  *o++ = q;
  /* Cut only at the start of a character, so the message stays UTF-8. */
  for (; s[i] && (i < TCCRT_REPR_BYTES || ((unsigned char)s[i] & 0xc0) == 0x80); i++) {
    unsigned char c = (unsigned char)s[i], next = (unsigned char)s[i + 1];
    if (c == '\\' || c == (unsigned char)q) *o++ = '\\', *o++ = (char)c;
    else if (c == '\n') o = escape(o, "\\n");
    else if (c == '\r') o = escape(o, "\\r");
    else if (c == '\t') o = escape(o, "\\t");
    else if (c < 0x20 || c == 0x7f) o = hex_escape(o, c);
    else if (c == 0xc2 && next >= 0x80 && next < 0xa0) o = hex_escape(o, next), i++; /* C1 controls */
    else *o++ = (char)c;
  }
  *o++ = q;
  if (s[i]) o = escape(o, "...");
  *o = 0;
  return out->text;
}

