BoutputJ0$…f·€Ж(—АLБ№dДxUIнхНСТ
UIнхНСТ
ЙйIm …5»lЬiйD