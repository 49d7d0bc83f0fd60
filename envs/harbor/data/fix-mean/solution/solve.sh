#!/bin/bash
cd /app
sed -i 's|sum(xs) / (len(xs) - 1)|sum(xs) / len(xs)|' stats.py
