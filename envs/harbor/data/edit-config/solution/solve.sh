#!/bin/bash
cd /app
python -c "
import json
c = json.load(open('config.json'))
c.update(debug=False, port=8080)
json.dump(c, open('config.json', 'w'))
"
