"""pytest reads this file from lab/, so that lab/ is where the lab's scripts import each other from, as they do when
run as ``python lab/NAME.py`` (Python puts a script's own folder first on its path). No code here."""
