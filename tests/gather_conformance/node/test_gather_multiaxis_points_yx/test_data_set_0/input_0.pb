BinputJ‹Jåñ©A •j&¯¼Í¯åbù
”_V“Æ