# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# Writes file's bytes as `const unsigned char NAME[]` and `NAME_len` (the
# web chat page compiled into the server).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n2)
math(EXPR n "${n2} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){24})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* generated from ${IN} by cmake/embed.cmake; do not edit */\n#include <stddef.h>\n"
  "const unsigned char ${NAME}[] = {\n${bytes}0x00};\nconst size_t ${NAME}_len = ${n};\n")
